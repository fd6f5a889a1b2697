#!/usr/bin/env bash
# Every lab node: install the project with its own Makefile targets, put kubectl on PATH, and run
# the CRI daemon (`nodeagent cri`) as a service. Idempotent: a second run changes nothing.
set -euo pipefail
LAB_STEP=common
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

log "project in $LAB_SRC, system root '${LAB_ROOT:-/}'"
[[ -f $LAB_SRC/Makefile ]] || die "no project at $LAB_SRC (is the synced folder there?)"

# What `make install` itself needs before it can install the rest (a bare Debian 12 box lacks them).
missing=()
for pkg in make python3-venv; do
    dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]} (needed by make install)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    changed "installed ${missing[*]}"
else
    unchanged "make and python3-venv are installed"
fi

# Extra CAs shared by the host (LAB_CA_CERTS in the Vagrantfile): trusted system-wide and by pip.
shopt -s nullglob
certs=("$LAB_SHARE"/ca-certificates/*.crt)
shopt -u nullglob
if ((${#certs[@]})); then
    certs_changed=0
    for crt in "${certs[@]}"; do
        dest=$LAB_ROOT/usr/local/share/ca-certificates/lab-${crt##*/}
        lab_install_file 0644 "$dest" <"$crt" && certs_changed=1
    done
    if [[ $certs_changed == 1 ]]; then
        update-ca-certificates >/dev/null
        log "update-ca-certificates: ok"
    fi
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' | lab_install_file 0644 "$LAB_ROOT/etc/pip.conf" || true
fi

# The host's wheelhouse (make lab-test builds it in vagrant/.lab/wheels): pip installs from it alone.
if [[ -f $LAB_SHARE/wheels/.complete ]]; then
    export PIP_FIND_LINKS=$LAB_SHARE/wheels PIP_NO_INDEX=1
    log "pip installs from the host's wheelhouse $LAB_SHARE/wheels (no index)"
fi

if [[ $LAB_SKIP_MAKE == 1 ]]; then
    log "skipping make install (LAB_SKIP_MAKE=1)"
else
    mkdir -p "$LAB_LOG_DIR"
    log "make install (Debian packages, .venv, generated and compiled parts, CNI plugins); log: $LAB_LOG_DIR/make-install.log"
    if ! "$MAKE" -C "$LAB_SRC" install CNI_BIN_DIR="$CNI_BIN_DIR" CNI_CONF_DIR="$CNI_CONF_DIR" \
            >"$LAB_LOG_DIR/make-install.log" 2>&1; then
        tail -n 40 "$LAB_LOG_DIR/make-install.log" >&2
        die "make install failed (full log: $LAB_LOG_DIR/make-install.log)"
    fi
    log "make install: ok"
fi
[[ -x $NODEAGENT ]] || die "$NODEAGENT is missing after make install"

# bgp: every node's agent runs its own BIRD (config and control socket under its data dir); the bird2
# package's own bird.service would be a second routing daemon on the node.
if [[ $LAB_POD_NETWORK == bgp ]] && "$SYSTEMCTL" is-enabled bird.service >/dev/null 2>&1; then
    "$SYSTEMCTL" disable --now bird.service >/dev/null 2>&1 && changed "bird.service disabled (the agent runs its own BIRD)"
fi

lab_symlink "$NODEAGENT" "$LAB_BIN_DIR/nodeagent"
if [[ -x $KUBECTL_SRC ]]; then
    lab_symlink "$KUBECTL_SRC" "$LAB_BIN_DIR/kubectl"
else
    log "no kubectl at $KUBECTL_SRC (make install unpacks it there); skipping the kubectl link"
fi

mkdir -p "$LAB_STATE_DIR" "$LAB_RUN_DIR" "$LAB_LOG_DIR"
unit_changed=0
# The host's registry mirrors and credentials (the Vagrantfile passes its registries.yaml through): the
# runtime re-reads the file when it changes, so only a new --registries flag needs a restart.
registries_flag=""
if [[ -n $LAB_REGISTRIES_B64 ]]; then
    base64 -d <<<"$LAB_REGISTRIES_B64" | lab_install_file 0600 "$LAB_ETC/registries.yaml" || true
    registries_flag="--registries $LAB_ETC/registries.yaml"
fi
lab_unit nodeagent-cri.service <<UNIT && unit_changed=1
# Written by vagrant/provision/common.sh: the nodeagent container runtime.
[Unit]
Description=nodeagent container runtime (CRI runtime.v1 on unix://$CRI_SOCKET)
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=$NODEAGENT cri --socket $CRI_SOCKET --state-dir $LAB_STATE_DIR/cri --cni-conf-dir $CNI_CONF_DIR --cni-bin-dir $CNI_BIN_DIR $registries_flag
Restart=on-failure
RestartSec=2
# Containers outlive the runtime: stopping the service stops the daemon only.
KillMode=process
Delegate=yes
StandardOutput=append:$LAB_LOG_DIR/cri.log
StandardError=inherit

[Install]
WantedBy=multi-user.target
UNIT
lab_service nodeagent-cri.service "$unit_changed"
if [[ $LAB_START == 1 ]]; then
    lab_wait "$LAB_READY_TIMEOUT" "the CRI socket $CRI_SOCKET" test -S "$CRI_SOCKET"
fi
lab_done
