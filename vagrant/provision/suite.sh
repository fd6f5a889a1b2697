#!/usr/bin/env bash
# LAB_TEST=1 on the control-plane VM: run the project's privileged test suite (`make test`) there,
# where the kernel has cgroup v2 and IPVS, which the build machine lacks.
set -euo pipefail
LAB_STEP=suite
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
: "${LAB_TEST:=0}"
: "${LAB_TEST_ARGS:=}"                              # extra pytest arguments (PYTEST_ARGS)

if [[ $LAB_TEST != 1 ]]; then
    log "LAB_TEST=$LAB_TEST: not running the test suite"
    exit 0
fi
[[ $(id -u) == 0 ]] || die "the privileged suite needs root"
mkdir -p "$LAB_LOG_DIR"
log "cgroup: $(stat -fc %T /sys/fs/cgroup) ; kernel $(uname -r)"
log "make test (ruff + the whole pytest suite as root); log: $LAB_LOG_DIR/suite.log"
if "$MAKE" -C "$LAB_SRC" test PYTEST_ARGS="$LAB_TEST_ARGS" >"$LAB_LOG_DIR/suite.log" 2>&1; then
    tail -n 5 "$LAB_LOG_DIR/suite.log"
    log "the privileged suite passed"
else
    tail -n 60 "$LAB_LOG_DIR/suite.log" >&2
    die "the privileged suite failed (full log in the VM: $LAB_LOG_DIR/suite.log)"
fi
