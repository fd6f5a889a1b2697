# shellcheck shell=bash
# Shared by the lab's provisioning scripts (sourced, never run). Every path the scripts write is
# derived from LAB_ROOT (empty on a real node) so a test can run them for real into a tmp root, and
# every write goes through lab_install_file, which leaves a file alone when its content is right:
# running a script twice changes nothing the second time.

: "${LAB_ROOT:=}"                                   # prefix of every system path written (tests: a tmp dir)
: "${LAB_SRC:=/vagrant}"                            # the project (the synced folder)
: "${LAB_SHARE:=$LAB_SRC/vagrant/.lab}"             # host-shared lab files: the join command
: "${LAB_JOIN_FILE:=$LAB_SHARE/join-command}"
: "${LAB_JOIN_TIMEOUT:=900}"                        # seconds a worker waits for the join command
: "${LAB_READY_TIMEOUT:=600}"                       # seconds to wait for a daemon to answer
: "${LAB_ETC:=$LAB_ROOT/etc/nodeagent}"
: "${LAB_UNIT_DIR:=$LAB_ROOT/etc/systemd/system}"
: "${LAB_BIN_DIR:=$LAB_ROOT/usr/local/bin}"
: "${LAB_STATE_DIR:=$LAB_ROOT/var/lib/nodeagent}"
: "${LAB_RUN_DIR:=$LAB_ROOT/run/nodeagent}"
: "${LAB_LOG_DIR:=$LAB_ROOT/var/log/nodeagent}"
: "${CNI_BIN_DIR:=$LAB_ROOT/opt/cni/bin}"
: "${CNI_CONF_DIR:=$LAB_ROOT/etc/cni/net.d}"
: "${LAB_NODE_IP:=}"                                # this node's private-network address (--node-ip)
: "${LAB_CP_IP:=192.168.56.10}"                     # the control plane's private-network address
: "${LAB_SERVER_PORT:=6443}"
: "${LAB_POD_NETWORK:=host-gw}"                    # cross-node pod network: host-gw, ipip, vxlan or bgp
: "${LAB_SERVER_ARGS:=}"                            # extra `nodeagent server` flags (e.g. the network mode)
: "${LAB_LB_POOL:=${LAB_CP_IP%.*}.240/28}"           # LoadBalancer addresses: a /28 of the private network
: "${LAB_POD_SUBNET:=}"                             # override of the node's IPAM-assigned spec.podCIDR
: "${LAB_AGENT_ARGS:=}"                             # extra `nodeagent agent` flags
: "${LAB_REGISTRIES_B64:=}"                         # base64 registries.yaml (k3s format) the host passes in
: "${LAB_START:=1}"                                 # 0: write units, start nothing
: "${LAB_SKIP_MAKE:=0}"                             # 1: the project is already installed
: "${SYSTEMCTL:=systemctl}"                         # the service manager (tests pass their own)
: "${MAKE:=make}"

# shellcheck disable=SC2034  # used by the scripts that source this file
{
NODEAGENT="$LAB_SRC/.venv/bin/nodeagent"
KUBECTL_SRC="$LAB_SRC/.cache/kubectl-1.20/usr/bin/kubectl"
CRI_SOCKET="$LAB_RUN_DIR/cri.sock"
}
LAB_STEP="${LAB_STEP:-lab}"
LAB_CHANGED=0

log() { printf '[%s] %s: %s\n' "$(date -u +%H:%M:%S)" "$LAB_STEP" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }
changed() { LAB_CHANGED=1; log "changed: $*"; }
unchanged() { log "unchanged: $*"; }

# lab_install_file MODE PATH: stdin becomes PATH unless PATH already has exactly that content and mode.
lab_install_file() {
    local mode=$1 path=$2 tmp
    mkdir -p "$(dirname "$path")"
    tmp=$(mktemp "$path.XXXXXX")
    cat >"$tmp"
    chmod "$mode" "$tmp"
    if [[ -f $path ]] && cmp -s "$tmp" "$path" && [[ $(stat -c %a "$path") == "${mode#0}" ]]; then
        rm -f "$tmp"
        unchanged "$path"
        return 1
    fi
    mv -f "$tmp" "$path"
    changed "$path"
    return 0
}

# lab_symlink TARGET PATH: PATH -> TARGET, left alone when it already points there.
lab_symlink() {
    local target=$1 path=$2
    if [[ -L $path && $(readlink "$path") == "$target" ]]; then
        unchanged "$path -> $target"
        return 0
    fi
    mkdir -p "$(dirname "$path")"
    ln -sfn "$target" "$path"
    changed "$path -> $target"
}

# lab_unit NAME: stdin is the unit; written, then daemon-reload and enable only when it changed.
# Returns 0 when the unit changed (the caller restarts the service), 1 otherwise.
lab_unit() {
    local name=$1
    if lab_install_file 0644 "$LAB_UNIT_DIR/$name"; then
        "$SYSTEMCTL" daemon-reload
        "$SYSTEMCTL" enable "$name" >/dev/null 2>&1 || "$SYSTEMCTL" enable "$name"
        return 0
    fi
    if ! "$SYSTEMCTL" is-enabled --quiet "$name"; then
        "$SYSTEMCTL" enable "$name" >/dev/null 2>&1 || "$SYSTEMCTL" enable "$name"
        changed "enabled $name"
    fi
    return 1
}

# lab_service NAME UNIT_CHANGED: start the service when it is down, restart it when its unit changed.
lab_service() {
    local name=$1 unit_changed=$2
    if [[ $LAB_START != 1 ]]; then
        log "not starting $name (LAB_START=$LAB_START)"
        return 0
    fi
    if [[ $unit_changed == 1 ]] && "$SYSTEMCTL" is-active --quiet "$name"; then
        "$SYSTEMCTL" restart "$name"
        changed "restarted $name (its unit changed)"
    elif ! "$SYSTEMCTL" is-active --quiet "$name"; then
        "$SYSTEMCTL" start "$name"
        changed "started $name"
    else
        unchanged "$name is running"
    fi
}

# lab_wait SECONDS WHAT COMMAND...: retry COMMAND every 2 s until it succeeds or SECONDS pass.
lab_wait() {
    local timeout=$1 what=$2 start
    shift 2
    start=$SECONDS
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS - start >= timeout)); then
            die "gave up after ${timeout}s waiting for $what"
        fi
        sleep 2
    done
    log "ready: $what ($((SECONDS - start))s)"
}

# lab_has_command NAME: this build's nodeagent CLI has the subcommand NAME.
lab_has_command() {
    "$NODEAGENT" "$1" --help >/dev/null 2>&1
}

lab_done() {
    if [[ $LAB_CHANGED == 1 ]]; then
        log "done (changes made)"
    else
        log "done (nothing to change)"
    fi
}
