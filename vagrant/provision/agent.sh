#!/usr/bin/env bash
# A worker VM: wait for the control plane's join command in the shared folder, then run
# `nodeagent agent --server ... --token ... --ca-cert-hash ...` as a service using the CRI daemon
# nodeagent-cri.service runs (never a second runtime of its own) and the lab's state dir.
# On cp it joins the control plane's own node (LAB_JOIN_OPTIONAL=1). Idempotent: a second run changes
# nothing (the agent restarts only when its unit or join changed).
set -euo pipefail
LAB_STEP=agent
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${LAB_JOIN_OPTIONAL:=0}"                          # 1 on cp: join only when the build can

[[ -x $NODEAGENT ]] || die "$NODEAGENT is missing: run common.sh first"
if [[ $LAB_JOIN_OPTIONAL == 1 && ! -s $LAB_JOIN_FILE ]]; then
    # On cp server.sh runs first: no join file means this build's server has no join flow yet.
    log "there is no join command from the control plane: this node does not join"
    exit 0
fi
log "waiting up to ${LAB_JOIN_TIMEOUT}s for the join command at $LAB_JOIN_FILE"
lab_wait "$LAB_JOIN_TIMEOUT" "the join command from the control plane ($LAB_JOIN_FILE)" test -s "$LAB_JOIN_FILE"

# Take only the three join flags, each checked, so nothing else in the file reaches the unit.
server="" token="" hash=""
read -r -a words <"$LAB_JOIN_FILE"
for ((i = 0; i < ${#words[@]}; i++)); do
    case ${words[i]} in
        --server) server=${words[i + 1]:-} ;;
        --server=*) server=${words[i]#--server=} ;;
        --token) token=${words[i + 1]:-} ;;
        --token=*) token=${words[i]#--token=} ;;
        --ca-cert-hash) hash=${words[i + 1]:-} ;;
        --ca-cert-hash=*) hash=${words[i]#--ca-cert-hash=} ;;
    esac
done
server_re='^https://[][A-Za-z0-9.:-]+$' token_re='^[A-Za-z0-9._-]+$' hash_re='^sha256:[0-9a-f]{64}$'
[[ $server =~ $server_re ]] || die "join command in $LAB_JOIN_FILE has no valid --server (got '$server')"
[[ $token =~ $token_re ]] || die "join command has no valid --token"
[[ -z $hash || $hash =~ $hash_re ]] || die "join command has an invalid --ca-cert-hash: $hash"
log "joining $server"

restart=0
lab_install_file 0600 "$LAB_ETC/join.env" <<ENV && restart=1
# Written by vagrant/provision/agent.sh from $LAB_JOIN_FILE.
JOIN_SERVER=$server
JOIN_TOKEN=$token
JOIN_CA_CERT_HASH=$hash
ENV
# The node's pod subnet is the spec.podCIDR the server's node IPAM gives it (--cluster-cidr, a /24 each):
# the agent adopts it, so nothing is passed here; LAB_POD_SUBNET is only an explicit override.
subnet_flag=""
[[ -n $LAB_POD_SUBNET ]] && subnet_flag="--pod-subnet $LAB_POD_SUBNET"
# The VMs have a NAT interface (the default route) and the private network: the node's address, which
# it reports as InternalIP and routes pods and NodePorts through, is the private one.
node_ip_flag=""
[[ -n $LAB_NODE_IP ]] && node_ip_flag="--node-ip $LAB_NODE_IP"
hash_flag=""
[[ -n $hash ]] && hash_flag="--ca-cert-hash \${JOIN_CA_CERT_HASH}"
lab_unit nodeagent-agent.service <<UNIT && restart=1
# Written by vagrant/provision/agent.sh: the nodeagent node agent, joined to the control plane.
[Unit]
Description=nodeagent node agent (joined to the control plane)
After=network-online.target nodeagent-cri.service
Wants=network-online.target
Requires=nodeagent-cri.service

[Service]
EnvironmentFile=$LAB_ETC/join.env
ExecStart=$NODEAGENT agent --server \${JOIN_SERVER} --token \${JOIN_TOKEN} $hash_flag $subnet_flag $node_ip_flag --data-dir $LAB_STATE_DIR --container-runtime-endpoint unix://$CRI_SOCKET $LAB_AGENT_ARGS
Restart=on-failure
RestartSec=2
StandardOutput=append:$LAB_LOG_DIR/agent.log
StandardError=inherit

[Install]
WantedBy=multi-user.target
UNIT
if lab_has_command agent; then
    lab_service nodeagent-agent.service "$restart"
else
    log "this build has no \`nodeagent agent\` yet: unit written, not started"
fi
lab_done
