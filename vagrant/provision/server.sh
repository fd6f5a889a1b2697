#!/usr/bin/env bash
# The control-plane VM: run `nodeagent server` (apiserver + controllers) as a service, give root and
# the vagrant user the admin kubeconfig, and leave the join command in the shared folder for workers.
# Idempotent: a second run changes nothing.
set -euo pipefail
LAB_STEP=server
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
: "${LAB_BIND_ADDRESS:=0.0.0.0}"
: "${LAB_USER:=vagrant}"

[[ -x $NODEAGENT ]] || die "$NODEAGENT is missing: run common.sh first"
mkdir -p "$LAB_STATE_DIR" "$LAB_LOG_DIR"
SERVER_LOG=$LAB_LOG_DIR/server.log
KUBECONFIG_SRC=$LAB_STATE_DIR/admin.kubeconfig

unit_changed=0
# LAB_SERVER_ARGS is a list of extra flags, split on purpose.
lab_unit nodeagent-server.service <<UNIT && unit_changed=1
# Written by vagrant/provision/server.sh: the nodeagent control plane.
[Unit]
Description=nodeagent control plane (apiserver, controllers) on https://$LAB_CP_IP:$LAB_SERVER_PORT
After=network-online.target nodeagent-cri.service
Wants=network-online.target

[Service]
ExecStart=$NODEAGENT server --data-dir $LAB_STATE_DIR --bind-address $LAB_BIND_ADDRESS --advertise-address $LAB_CP_IP --port $LAB_SERVER_PORT --pod-network $LAB_POD_NETWORK --service-lb-pool $LAB_LB_POOL $LAB_SERVER_ARGS
Restart=on-failure
RestartSec=2
StandardOutput=append:$SERVER_LOG
StandardError=inherit

[Install]
WantedBy=multi-user.target
UNIT
lab_service nodeagent-server.service "$unit_changed"
[[ $LAB_START == 1 ]] || { lab_done; exit 0; }

lab_wait "$LAB_READY_TIMEOUT" "the admin kubeconfig $KUBECONFIG_SRC" test -s "$KUBECONFIG_SRC"
if [[ -x $KUBECTL_SRC ]]; then
    lab_wait "$LAB_READY_TIMEOUT" "the apiserver's /readyz" \
        "$KUBECTL_SRC" --kubeconfig "$KUBECONFIG_SRC" get --raw /readyz
fi

# kubectl works for root and for the vagrant user (`vagrant ssh cp -c 'kubectl get nodes'`).
lab_install_file 0600 "$LAB_ETC/admin.kubeconfig" <"$KUBECONFIG_SRC" || true
lab_install_file 0600 "$LAB_ROOT/root/.kube/config" <"$KUBECONFIG_SRC" || true
if id -u "$LAB_USER" >/dev/null 2>&1; then
    home=$LAB_ROOT$(getent passwd "$LAB_USER" | cut -d: -f6)
    if lab_install_file 0600 "$home/.kube/config" <"$KUBECONFIG_SRC"; then
        chown -R "$LAB_USER:" "$home/.kube"
    fi
else
    log "no user $LAB_USER here; kubeconfig only for root"
fi

# The join command: `nodeagent server` prints it; workers read it from the shared folder.
if ! lab_has_command agent; then
    log "this build has no \`nodeagent agent\` yet: no join command to hand to workers"
    lab_done
    exit 0
fi
join_line() { grep -o 'nodeagent agent --server .*' "$SERVER_LOG" 2>/dev/null | tail -n 1; }
# The server is ready by now and prints its join command at start; allow it a few seconds to be logged.
join=""
for _ in 1 2 3 4 5 6 7 8 9 10; do
    join=$(join_line || true)
    [ -n "$join" ] && break
    sleep 1
done
if [ -z "$join" ]; then
    log "the server printed no join command (this build's server has no join flow yet): workers cannot join"
    lab_done
    exit 0
fi
if printf '%s\n' "$join" | lab_install_file 0600 "$LAB_JOIN_FILE"; then
    log "join command for workers written to $LAB_JOIN_FILE"
fi
lab_done
