#!/usr/bin/env bash
# LAB_TEST=1 on the control-plane VM: run the privileged tests that need what only the lab's kernel has
# (IPVS, cgroup v2; the build machine has neither), not the whole suite, which takes hours under emulation.
# LAB_TEST_SUITE overrides the selection: pytest selections separated by ';' (each quoted as in a shell,
# e.g. "tests/integration/netproxy -k 'ipvs and not drift'"), or `all` for the whole `make test`.
set -euo pipefail
LAB_STEP=suite
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
: "${LAB_TEST:=0}"
: "${LAB_TEST_ARGS:=}"                              # extra pytest arguments for every selection
# 1 (the Vagrantfile's choice): a failed suite is recorded in $LAB_LOG_DIR/suite.result and this step
# succeeds, so cp still starts its server and the workers join (they wait for cp's join command); the
# cp trigger, or make lab-test after its cross-node checks, then reports the failure.
: "${LAB_TEST_KEEP_GOING:=0}"
# IPVS mode of the Service proxy; the runtime's cgroup v2 driver, file level and on the kernel (limits,
# live updates, OOM, failed joins); the CRI conformance specs against our runtime.
LAB_TEST_DEFAULT_SUITE="tests/integration/netproxy/test_dataplane.py -k ipvs;\
tests/unit/cri/test_cgroups.py tests/integration/cri/test_lifecycle.py tests/integration/cri/test_cgroup_failures.py;\
tests/conformance/cri -k nodeagent"
: "${LAB_TEST_SUITE:=$LAB_TEST_DEFAULT_SUITE}"

if [[ $LAB_TEST != 1 ]]; then
    log "LAB_TEST=$LAB_TEST: not running the test suite"
    exit 0
fi
[[ $(id -u) == 0 ]] || die "the privileged suite needs root"
mkdir -p "$LAB_LOG_DIR"
SUITE_LOG=$LAB_LOG_DIR/suite.log
RESULT=$LAB_LOG_DIR/suite.result
echo running >"$RESULT"
log "cgroup: $(stat -fc %T /sys/fs/cgroup) ; kernel $(uname -r)"
: >"$SUITE_LOG"
# the verdict in $RESULT: `passed`, or what failed (the step fails too unless LAB_TEST_KEEP_GOING=1)
verdict() {
    if [[ $1 == passed ]]; then
        echo passed >"$RESULT"
        return 0
    fi
    echo "$1 (log in the VM: $SUITE_LOG)" >"$RESULT"
    if [[ $LAB_TEST_KEEP_GOING == 1 ]]; then
        log "ERROR: $1 (full log in the VM: $SUITE_LOG); provisioning goes on so the workers can join, and the failure is reported once cp is up" >&2
        exit 0
    fi
    die "$1 (full log in the VM: $SUITE_LOG)"
}

if [[ $LAB_TEST_SUITE == all ]]; then
    log "make test (ruff + the whole pytest suite as root); log: $SUITE_LOG"
    if "$MAKE" -C "$LAB_SRC" test PYTEST_ARGS="$LAB_TEST_ARGS" >>"$SUITE_LOG" 2>&1; then
        tail -n 5 "$SUITE_LOG"
        log "the privileged suite passed"
        verdict passed
        exit 0
    fi
    tail -n 60 "$SUITE_LOG" >&2
    verdict "the privileged suite failed"
fi

PY=$LAB_SRC/.venv/bin/python
[[ -x $PY ]] || die "$PY is missing: run common.sh first"
# split "a -k 'x and y'" as a shell would, without evaluating anything
# (one line per word and none for an empty string: an empty argument would make pytest collect the whole rootdir)
words() { "$PY" -c 'import shlex, sys; sys.stdout.write("".join(w + "\n" for w in shlex.split(sys.argv[1])))' "$1"; }

failed=()
IFS=';' read -r -a selections <<<"$LAB_TEST_SUITE"
for sel in "${selections[@]}"; do
    [[ -n ${sel//[[:space:]]/} ]] || continue
    mapfile -t argv < <(words "$sel")
    mapfile -t extra < <(words "$LAB_TEST_ARGS")
    log "pytest ${argv[*]} ${extra[*]}; log: $SUITE_LOG"
    printf '\n=== pytest %s %s\n' "${argv[*]}" "${extra[*]}" >>"$SUITE_LOG"
    if (cd "$LAB_SRC" && "$PY" -m pytest "${argv[@]}" "${extra[@]}") >>"$SUITE_LOG" 2>&1; then
        log "passed: $(tail -n 1 "$SUITE_LOG")"
    else
        tail -n 40 "$SUITE_LOG" >&2
        failed+=("$sel")
    fi
done
if ((${#failed[@]})); then
    verdict "the privileged subset failed: ${failed[*]}"
fi
log "the privileged subset passed"
verdict passed
