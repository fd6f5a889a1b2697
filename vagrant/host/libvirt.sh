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
