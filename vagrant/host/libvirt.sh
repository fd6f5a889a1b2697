#!/usr/bin/env bash
# Make sure libvirtd and virtlogd run on this host. With systemd they are its services; without it
# (containers, CI) they are started by hand here, daemonized, and left running for later labs.
# `libvirt.sh stop` stops the ones this script started (their pids are under LAB_LIBVIRT_RUN) and
# removes the firewall chains libvirtd made.
set -euo pipefail
: "${LAB_LIBVIRT_RUN:=/run/nodeagent-lab}"
log() { printf '[%s] lab-libvirt: %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

running() { [[ -f $LAB_LIBVIRT_RUN/$1.pid ]] && kill -0 "$(cat "$LAB_LIBVIRT_RUN/$1.pid")" 2>/dev/null; }

case ${1:-start} in
start)
    # libvirt probes QEMU's capabilities with KVM (QEMU, started with privileges, can open /dev/kvm)
    # but then finds /dev/kvm inaccessible to its qemu user (0600 root:root where no udev set it up,
    # e.g. in a container) and drops the cache on every call: an endless re-probe, and `vagrant up`
    # hangs after defining the domains. Give /dev/kvm Debian's udev mode (0660 root:kvm), as long
    # as the lab runs; `stop` puts the old one back. The driver (kvm or qemu) stays the caller's choice.
    if [[ -c /dev/kvm ]] && getent group kvm >/dev/null && [[ $(stat -c %G /dev/kvm) != kvm ]]; then
        mkdir -p "$LAB_LIBVIRT_RUN"
        stat -c '%a %U:%G' /dev/kvm >"$LAB_LIBVIRT_RUN/kvm.mode"
        chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
        log "/dev/kvm: 0660 root:kvm for libvirt's qemu user (was $(cat "$LAB_LIBVIRT_RUN/kvm.mode"))"
    fi
    if [[ -d /run/systemd/system ]]; then
        systemctl start virtlogd.socket libvirtd.service
        log "libvirtd and virtlogd are systemd services: started"
    else
        mkdir -p "$LAB_LIBVIRT_RUN"
        for daemon in virtlogd libvirtd; do
            command -v "$daemon" >/dev/null || die "$daemon is missing: run make lab-deps"
            if running "$daemon"; then
                log "$daemon is running (pid $(cat "$LAB_LIBVIRT_RUN/$daemon.pid"))"
                continue
            fi
            "$daemon" --daemon --pid-file "$LAB_LIBVIRT_RUN/$daemon.pid"
            log "started $daemon by hand (no systemd here)"
        done
    fi
    for _ in $(seq 60); do
        virsh -c qemu:///system version >/dev/null 2>&1 && break
        sleep 1
    done
    virsh -c qemu:///system version >/dev/null || die "libvirtd does not answer on qemu:///system"
    # vagrant-libvirt's storage pool: `default` under /var/lib/libvirt/images unless it exists.
    pool=${LAB_STORAGE_POOL:-default}
    if ! virsh -c qemu:///system pool-info "$pool" >/dev/null 2>&1; then
        mkdir -p /var/lib/libvirt/images
        virsh -c qemu:///system pool-define-as "$pool" dir --target /var/lib/libvirt/images >/dev/null
        virsh -c qemu:///system pool-autostart "$pool" >/dev/null
        log "defined the storage pool $pool"
    fi
    virsh -c qemu:///system pool-start "$pool" >/dev/null 2>&1 || true
    log "libvirt ready (storage pool $pool)"
    ;;
stop)
    stopped=0
    for daemon in libvirtd virtlogd; do
        if running "$daemon"; then
            kill "$(cat "$LAB_LIBVIRT_RUN/$daemon.pid")"
            log "stopped $daemon"
            stopped=1
        fi
        rm -f "$LAB_LIBVIRT_RUN/$daemon.pid"
    done
    if [[ -f $LAB_LIBVIRT_RUN/kvm.mode && -c /dev/kvm ]]; then
        read -r mode owner <"$LAB_LIBVIRT_RUN/kvm.mode"
        chown "$owner" /dev/kvm && chmod "$mode" /dev/kvm
        rm -f "$LAB_LIBVIRT_RUN/kvm.mode"
        log "/dev/kvm: back to $mode $owner"
    fi
    # libvirtd leaves its (empty) top-level firewall chains behind; remove the ones it made.
    if [[ $stopped == 1 ]]; then
        sleep 1
        for ipt in iptables ip6tables; do
            for table in nat mangle; do
                while "$ipt" -t "$table" -D POSTROUTING -j LIBVIRT_PRT 2>/dev/null; do :; done
                if "$ipt" -t "$table" -F LIBVIRT_PRT 2>/dev/null; then "$ipt" -t "$table" -X LIBVIRT_PRT || :; fi
            done
            for chain in INP:INPUT OUT:OUTPUT FWX:FORWARD FWI:FORWARD FWO:FORWARD; do
                while "$ipt" -D "${chain#*:}" -j "LIBVIRT_${chain%%:*}" 2>/dev/null; do :; done
                if "$ipt" -F "LIBVIRT_${chain%%:*}" 2>/dev/null; then "$ipt" -X "LIBVIRT_${chain%%:*}" || :; fi
            done
        done
        log "removed libvirt's firewall chains"
    fi
    ;;
*)
    die "usage: $0 [start|stop]"
    ;;
esac
