#!/usr/bin/env bash
# Inside the control-plane VM (make lab-test runs it): every node of the lab registers and is Ready.
set -euo pipefail
LAB_STEP=checks
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
: "${LAB_EXPECT_NODES:?how many nodes the lab has}"
export KUBECONFIG=$LAB_ETC/admin.kubeconfig

nodes_ready() {
    local ready
    ready=$("$KUBECTL_SRC" get nodes --no-headers 2>/dev/null | awk '$2 == "Ready"' | wc -l)
    ((ready >= LAB_EXPECT_NODES))
}
lab_wait "$LAB_READY_TIMEOUT" "$LAB_EXPECT_NODES node(s) Ready" nodes_ready
"$KUBECTL_SRC" get nodes -o wide
log "all $LAB_EXPECT_NODES node(s) are Ready"
