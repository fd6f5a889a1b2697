#!/usr/bin/env bash
# The lab's checks (make lab-test runs them inside the VMs):
#   LAB_CHECK=image    on every node: the test image (busybox httpd, built locally from Debian's
#                      busybox-static, no registry) is in the node's image store. Idempotent.
#   LAB_CHECK=cluster  on cp: every node is Ready, then cross-node traffic: one httpd pod pinned to each
#                      node, its IP from the node's spec.podCIDR (the server's node IPAM assigned it, the
#                      agent adopted it), each pod fetches the other's page by pod IP (pod to pod across
#                      nodes), cp fetches every pod, and a ClusterIP Service answers from both nodes' pods.
set -euo pipefail
LAB_STEP=checks
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
: "${LAB_CHECK:=cluster}"
: "${LAB_CHECK_NAMESPACE:=lab-checks}"
IMAGE=localhost/httpd:v1
export KUBECONFIG=$LAB_ETC/admin.kubeconfig
kubectl() { "$KUBECTL_SRC" "$@"; }

if [[ $LAB_CHECK == image ]]; then
    if "$NODEAGENT" image ls | awk -v r="${IMAGE%:*}" -v t="${IMAGE##*:}" '$1 == r && $2 == t {f=1} END {exit !f}'; then
        unchanged "$IMAGE is in the image store"
    else
        tmp=$(mktemp -d)
        archive=$("$LAB_SRC/.venv/bin/python" -c 'import sys
from pathlib import Path
from nodeagent.testing.images import HTTPD, build
print(build(HTTPD, Path(sys.argv[1])).docker_archive)' "$tmp")
        "$NODEAGENT" image import --no-progress "$archive" >/dev/null
        rm -rf "$tmp"
        changed "imported $IMAGE"
    fi
    lab_done
    exit 0
fi
[[ $LAB_CHECK == cluster ]] || die "LAB_CHECK=$LAB_CHECK: expected image or cluster"
: "${LAB_EXPECT_NODES:?how many nodes the lab has}"

nodes_ready() {
    local ready
    ready=$(kubectl get nodes --no-headers 2>/dev/null | awk '$2 == "Ready"' | wc -l)
    ((ready >= LAB_EXPECT_NODES))
}
lab_wait "$LAB_READY_TIMEOUT" "$LAB_EXPECT_NODES node(s) Ready" nodes_ready
kubectl get nodes -o wide
log "all $LAB_EXPECT_NODES node(s) are Ready"

# One pod per node, each serving a page that names it; a Service over all of them.
mapfile -t nodes < <(kubectl get nodes --no-headers -o custom-columns=NAME:.metadata.name)
kubectl delete namespace "$LAB_CHECK_NAMESPACE" --ignore-not-found --wait=true >/dev/null
kubectl create namespace "$LAB_CHECK_NAMESPACE" >/dev/null
for node in "${nodes[@]}"; do
    kubectl -n "$LAB_CHECK_NAMESPACE" apply -f - >/dev/null <<POD
apiVersion: v1
kind: Pod
metadata:
  name: web-$node
  labels: {app: lab-web}
spec:
  nodeName: $node
  containers:
  - name: web
    image: $IMAGE
    imagePullPolicy: Never
    command: ["sh", "-c", "echo $node >/var/www/index.html && exec httpd -f -p 80 -h /var/www"]
POD
done
kubectl -n "$LAB_CHECK_NAMESPACE" apply -f - >/dev/null <<SVC
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: lab-web}
  ports: [{port: 80, targetPort: 80}]
SVC
pods_running() {
    local running
    running=$(kubectl -n "$LAB_CHECK_NAMESPACE" get pods --no-headers 2>/dev/null | awk '$3 == "Running"' | wc -l)
    ((running == ${#nodes[@]}))
}
lab_wait "$LAB_READY_TIMEOUT" "one running pod on each of ${nodes[*]}" pods_running
kubectl -n "$LAB_CHECK_NAMESPACE" get pods -o wide

# wget runs under `timeout`: busybox-static's own wget -T crashes (SIGSEGV) on Debian 12.
declare -A ip
for node in "${nodes[@]}"; do
    ip[$node]=$(kubectl -n "$LAB_CHECK_NAMESPACE" get pod "web-$node" -o jsonpath='{.status.podIP}')
done
failed=0
check() {
    local what=$1 want=$2 got
    shift 2
    if got=$("$@" 2>&1) && [[ $got == "$want" ]]; then
        log "ok: $what -> $got"
    else
        log "FAILED: $what: expected '$want', got '$got'"
        failed=1
    fi
}
kubectl get nodes -o custom-columns='NAME:.metadata.name,INTERNAL-IP:.status.addresses[?(@.type=="InternalIP")].address,POD-CIDR:.spec.podCIDR'
in_cidr() { python3 -c 'import ipaddress, sys; print(ipaddress.ip_address(sys.argv[1]) in ipaddress.ip_network(sys.argv[2]))' "$@"; }
for node in "${nodes[@]}"; do
    cidr=$(kubectl get node "$node" -o jsonpath='{.spec.podCIDR}')
    check "pod web-$node (${ip[$node]}) in $node's spec.podCIDR ($cidr)" True in_cidr "${ip[$node]}" "${cidr:-none}"
done
for from in "${nodes[@]}"; do
    for to in "${nodes[@]}"; do
        check "pod on $from -> pod on $to (${ip[$to]})" "$to" \
            kubectl -n "$LAB_CHECK_NAMESPACE" exec "web-$from" -- timeout 10 wget -qO- "http://${ip[$to]}/"
    done
    check "cp -> pod on $from (${ip[$from]})" "$from" timeout 10 busybox wget -qO- "http://${ip[$from]}/"
done
cluster_ip=$(kubectl -n "$LAB_CHECK_NAMESPACE" get service web -o jsonpath='{.spec.clusterIP}')
# The Service spreads over both nodes' pods: a few tries from each pod reach every backend.
for from in "${nodes[@]}"; do
    seen="" want=$(printf '%s\n' "${nodes[@]}" | sort | xargs)
    for _ in $(seq 20); do
        page=$(kubectl -n "$LAB_CHECK_NAMESPACE" exec "web-$from" -- timeout 10 wget -qO- "http://$cluster_ip/" 2>/dev/null) || continue
        [[ " $seen " == *" $page "* ]] || seen="$seen $page"
        [[ $(printf '%s\n' "$seen" | xargs -n1 | sort | xargs) != "$want" ]] || break
    done
    seen=$(printf '%s\n' "$seen" | xargs -n1 | sort | xargs)
    check "Service $cluster_ip from the pod on $from reaches the pods on" "$want" echo "$seen"
done
((failed == 0)) || die "cross-node checks failed"
kubectl delete namespace "$LAB_CHECK_NAMESPACE" --wait=false >/dev/null
log "cross-node checks passed on ${#nodes[@]} node(s)"
