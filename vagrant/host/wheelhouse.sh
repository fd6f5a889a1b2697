#!/usr/bin/env bash
# The guests' wheelhouse: every wheel the project's `make install` needs (dependencies, every extra,
# the build backend, pip), built here at native speed into vagrant/.lab/wheels (gitignored, synced
# to the guests). make lab-box installs the lab box's venv from it; provision/common.sh points the
# guests' pip at it (--no-index): no sdist builds and no TLS index queries under emulation.
# Rebuilt only when pyproject.toml changes. Prints the wheelhouse's path.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${LAB_WHEELS:=$REPO/vagrant/.lab/wheels}"
log() { printf '[%s] lab-wheels: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

inputs=$(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1)
if [[ -f $LAB_WHEELS/.complete && -f $LAB_WHEELS/requirements.txt && $(cat "$LAB_WHEELS/.complete") == "$inputs" ]]; then
    log "unchanged: $LAB_WHEELS"
    echo "$LAB_WHEELS"
    exit 0
fi
log "building the guests' wheelhouse in $LAB_WHEELS"
rm -rf "$LAB_WHEELS" && mkdir -p "$LAB_WHEELS"
mapfile -t reqs < <(python3 -c '
import sys, tomllib
d = tomllib.load(open(sys.argv[1], "rb"))
extras = [r for extra in d["project"].get("optional-dependencies", {}).values() for r in extra]
print("\n".join(d["project"]["dependencies"] + extras + d["build-system"]["requires"] + ["pip"]))' "$REPO/pyproject.toml")
start=$SECONDS
python3 -m pip wheel -q -w "$LAB_WHEELS" "${reqs[@]}" >"$LAB_WHEELS.log" 2>&1 ||
    { tail -n 20 "$LAB_WHEELS.log" >&2; die "pip wheel failed (log: $LAB_WHEELS.log)"; }
printf '%s\n' "${reqs[@]}" >"$LAB_WHEELS/requirements.txt"
echo "$inputs" >"$LAB_WHEELS/.complete"
log "$(find "$LAB_WHEELS" -name '*.whl' | wc -l) wheels in $((SECONDS - start))s"
echo "$LAB_WHEELS"
