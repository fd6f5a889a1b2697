#!/usr/bin/env bash
# make lab-test: the lab for real, opt-in. Brings up cp + one worker with vagrant-libvirt from the
# box `make lab-box` built, waits until every node is Ready, runs the checks inside cp, and destroys
# the VMs whatever happened. Under software emulation (LAB_LIBVIRT_DRIVER=qemu) expect ~10-20 min.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${LAB_BOX_FILE:=$REPO/.cache/lab/debian12.box}"
: "${LAB_BOX:=nodeagent/debian12}"
: "${LAB_WORKERS:=1}"
: "${LAB_KEEP:=0}"                                   # 1: leave the VMs up for a look
export VAGRANT_HOME=${VAGRANT_HOME:-$REPO/.cache/lab/vagrant.d}
export VAGRANT_DOTFILE_PATH=${VAGRANT_DOTFILE_PATH:-$REPO/.cache/lab/dot}
export VAGRANT_DEFAULT_PROVIDER=libvirt VAGRANT_CHECKPOINT_DISABLE=1
# KVM when it can start a vCPU here, else QEMU's software emulation; LAB_LIBVIRT_DRIVER wins. A
# /dev/kvm that opens is not enough: on some nested hosts QEMU aborts at the first MSR write ("failed to
# set MSR 0x10a"), so a paused throwaway QEMU that is still alive after 3 s is the test.
kvm_starts_a_vcpu() {
    [[ -r /dev/kvm && -w /dev/kvm ]] && command -v qemu-system-x86_64 >/dev/null || return 1
    local rc=0
    timeout 3 qemu-system-x86_64 -accel kvm -cpu host -m 64 -nodefaults -display none -S -monitor none \
        >/dev/null 2>&1 || rc=$?
    [[ $rc == 124 ]]
}
if [[ -z ${LAB_LIBVIRT_DRIVER:-} ]]; then
    if kvm_starts_a_vcpu; then LAB_LIBVIRT_DRIVER=kvm; else LAB_LIBVIRT_DRIVER=qemu; fi
fi
# This host's extra CAs (a TLS-intercepting proxy's, say) so the guests reach PyPI as it does.
if [[ -z ${LAB_CA_CERTS:-} ]] && compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    LAB_CA_CERTS=/usr/local/share/ca-certificates
fi
export LAB_LIBVIRT_DRIVER LAB_BOX WORKERS=$LAB_WORKERS LAB_CA_CERTS=${LAB_CA_CERTS:-}
# LAB_TEST=1: a failed privileged suite is reported after the cross-node checks, so one run says both
export LAB_TEST_VERDICT=end
log() { printf '[%s] lab-test: %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

command -v vagrant >/dev/null || die "vagrant is missing: run make lab-deps"
vagrant plugin list 2>/dev/null | grep -q vagrant-libvirt || die "vagrant-libvirt is missing: run make lab-deps"
"$REPO/vagrant/host/libvirt.sh" start

# A rebuilt box (make lab-box) replaces the added one and its image in the storage pool.
added=$VAGRANT_HOME/lab-box.inputs
if [[ -f $LAB_BOX_FILE.inputs && -f $added ]] && ! cmp -s "$LAB_BOX_FILE.inputs" "$added" &&
    vagrant box list 2>/dev/null | grep -q "^$LAB_BOX "; then
    log "$LAB_BOX_FILE was rebuilt: replacing the box $LAB_BOX"
    vagrant box remove --force --all "$LAB_BOX" || vagrant box remove --force "$LAB_BOX"
    pool=${LAB_STORAGE_POOL:-default}
    virsh -c qemu:///system vol-list "$pool" | awk -v p="${LAB_BOX//\//-VAGRANTSLASH-}_vagrant_box_image_" \
        'index($1, p) == 1 {print $1}' | while read -r vol; do
        virsh -c qemu:///system vol-delete --pool "$pool" "$vol" >/dev/null && log "removed the old box image $vol"
    done
fi
if ! vagrant box list 2>/dev/null | grep -q "^$LAB_BOX "; then
    [[ -f $LAB_BOX_FILE ]] || die "no box $LAB_BOX and no $LAB_BOX_FILE: run make lab-box"
    log "adding the box $LAB_BOX from $LAB_BOX_FILE"
    start=$SECONDS
    vagrant box add --name "$LAB_BOX" "$LAB_BOX_FILE"
    [[ ! -f $LAB_BOX_FILE.inputs ]] || cp "$LAB_BOX_FILE.inputs" "$added"
    log "vagrant box add took $((SECONDS - start))s"
fi

# The guests' pip installs from a wheelhouse built here (host/wheelhouse.sh, shared in vagrant/.lab).
"$REPO/vagrant/host/wheelhouse.sh" >/dev/null

cd "$REPO/vagrant"
destroy() {
    local rc=$?
    if [[ $LAB_KEEP == 1 ]]; then
        log "LAB_KEEP=1: leaving the VMs up (vagrant destroy -f in vagrant/ with the same environment)"
    else
        log "destroying the VMs"
        vagrant destroy -f || log "vagrant destroy failed: check virsh -c qemu:///system list --all"
        "$REPO/vagrant/host/libvirt.sh" stop
    fi
    exit "$rc"
}
trap destroy EXIT

log "vagrant up: cp + $LAB_WORKERS worker(s), box $LAB_BOX, libvirt driver $LAB_LIBVIRT_DRIVER"
start=$SECONDS
vagrant up --provider=libvirt
log "vagrant up took $((SECONDS - start))s"
machines=(cp)
for ((i = 1; i <= LAB_WORKERS; i++)); do machines+=("worker$i"); done
start=$SECONDS
for m in "${machines[@]}"; do
    vagrant ssh "$m" -c "sudo env LAB_CHECK=image bash /vagrant/vagrant/provision/checks.sh"
done
log "the test image is on every node ($((SECONDS - start))s)"
start=$SECONDS
cluster=0
vagrant ssh cp -c "sudo env LAB_CHECK=cluster LAB_EXPECT_NODES=${#machines[@]} bash /vagrant/vagrant/provision/checks.sh" ||
    cluster=$?
log "cross-node checks took $((SECONDS - start))s"
suite=passed
if [[ ${LAB_TEST:-0} == 1 ]]; then
    suite=$(vagrant ssh cp -c "sudo cat /var/log/nodeagent/suite.result" 2>/dev/null | tr -d '\r') || true
    log "LAB_TEST suite on cp: ${suite:-no verdict}"
fi
((cluster == 0)) || die "the cross-node checks failed (exit $cluster)"
[[ $suite == passed ]] || die "the privileged suite on cp did not pass: ${suite:-no verdict}"
log "the lab works"
