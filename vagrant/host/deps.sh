#!/usr/bin/env bash
# make lab-deps: the host side of the lab (Vagrant with vagrant-libvirt, libvirt, QEMU, and the box
# builder's tools), from Debian packages. Installs only what is missing; a second run changes nothing.
set -euo pipefail
: "${LAB_APT_PACKAGES:?the Makefile passes the package list}"
log() { printf '[lab-deps] %s\n' "$*"; }

missing=()
for pkg in $LAB_APT_PACKAGES; do
    dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]} == 0)); then
    log "all installed: $LAB_APT_PACKAGES"
    exit 0
fi
log "installing: ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
