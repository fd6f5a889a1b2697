#!/usr/bin/env bash
# make lab-box: a Debian 12 libvirt box built offline from Debian packages (no Vagrant Cloud needed).
# debootstrap a root file system (kernel, systemd, openssh, sudo, ifupdown with DHCP on eth0, rsync,
# make, python3-venv), add the `vagrant` user with Vagrant's insecure public key from the Debian
# `vagrant` package, make an ext4 image of it with mke2fs -d and a disk with GRUB's boot.img and
# core.img in front (no loop devices, no mounts), convert it to qcow2 and pack metadata.json +
# box.img + Vagrantfile as a .box. The debootstrap result is cached; an unchanged build is skipped.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${LAB_BOX_DIR:=$REPO/.cache/lab}"
: "${LAB_BOX_FILE:=$LAB_BOX_DIR/debian12.box}"
: "${LAB_BOX_SIZE_GB:=20}"
: "${LAB_MIRROR:=http://deb.debian.org/debian}"
: "${LAB_SUITE:=bookworm}"
: "${LAB_BOX_EXTRA_PACKAGES:=}"                      # installed in the chroot, natively (make lab-box: the project's APT_PACKAGES)
: "${LAB_BOX_WHEELS:=}"                               # host/wheelhouse.sh's output: a ready venv in the box
: "${LAB_BOX_SRC:=/vagrant}"                        # where the guests have the project (the synced folder)
: "${LAB_BOX_CA_CERTS:=}"                            # a dir of extra CA *.crt to trust (make lab-box: this host's)
# Debian services the extra packages bring that a lab node does not run (it uses nodeagent's own
# runtime): disabled in the box so they do not compete for the guests' emulated CPU.
: "${LAB_BOX_DISABLE_UNITS:=containerd.service etcd.service docker-registry.service podman-auto-update.timer podman-restart.service podman-clean-transient.timer}"
: "${LAB_VAGRANT_PUBKEY:=$(find /usr/share/rubygems-integration/all/gems -path '*/vagrant-*/keys/vagrant.pub' 2>/dev/null | sort | tail -n 1)}"
GRUB_DIR=/usr/lib/grub/i386-pc
PACKAGES=linux-image-amd64,initramfs-tools,systemd-sysv,udev,dbus,openssh-server,sudo,ifupdown,isc-dhcp-client,rsync,make,python3,python3-venv,ca-certificates,iproute2,kmod,procps,e2fsprogs,less,netbase
log() { printf '[%s] lab-box: %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root (debootstrap, chroot)"
for tool in debootstrap mke2fs sfdisk qemu-img grub-mkimage; do
    command -v "$tool" >/dev/null || die "$tool is missing: run make lab-deps"
done
[[ -f $GRUB_DIR/boot.img ]] || die "$GRUB_DIR is missing: install grub-pc-bin (make lab-deps)"
[[ -f $LAB_VAGRANT_PUBKEY ]] || die "Vagrant's insecure public key is missing: install the vagrant package"

# Skip an unchanged build: the box records the inputs it was made from.
shopt -s nullglob
ca_certs=()
[[ -z $LAB_BOX_CA_CERTS ]] || ca_certs=("$LAB_BOX_CA_CERTS"/*.crt)
shopt -u nullglob
inputs=$(printf '%s\n' "$(sha256sum "${BASH_SOURCE[0]}")" "$LAB_SUITE $LAB_MIRROR $LAB_BOX_SIZE_GB $PACKAGES $LAB_BOX_EXTRA_PACKAGES" \
    "$LAB_BOX_DISABLE_UNITS" "$( ((${#ca_certs[@]} == 0)) || sha256sum "${ca_certs[@]}")" \
    "$LAB_BOX_SRC $( [[ -z $LAB_BOX_WHEELS ]] || cat "$LAB_BOX_WHEELS/.complete" "$LAB_BOX_WHEELS/requirements.txt")" \
    "$(sha256sum "$LAB_VAGRANT_PUBKEY")" | sha256sum | cut -d' ' -f1)
if [[ -f $LAB_BOX_FILE && -f $LAB_BOX_FILE.inputs && $(cat "$LAB_BOX_FILE.inputs") == "$inputs" ]]; then
    log "unchanged: $LAB_BOX_FILE"
    exit 0
fi

mkdir -p "$LAB_BOX_DIR"
work=$(mktemp -d "$LAB_BOX_DIR/build.XXXXXX")
root=$work/root
cleanup() {
    for m in tmp/lab-wheels proc sys dev/pts dev; do
        mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m"
    done
    rm -rf "$work"
}
trap cleanup EXIT

# The chroot's /proc, /sys, /dev and DNS while packages are installed in it; no daemon starts there
# (policy-rc.d 101): they start when the VM boots.
chroot_enter() {
    mount -t proc proc "$root/proc"
    mount -t sysfs sysfs "$root/sys"
    mount --bind /dev "$root/dev"
    mount --bind /dev/pts "$root/dev/pts"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 0755 "$root/usr/sbin/policy-rc.d"
}
chroot_leave() {
    rm -f "$root/usr/sbin/policy-rc.d" "$root/etc/resolv.conf"
    for m in dev/pts dev sys proc; do umount "$root/$m"; done
}

rootfs_cache=$LAB_BOX_DIR/rootfs-$LAB_SUITE-$(printf '%s' "$PACKAGES $LAB_MIRROR" | sha256sum | cut -c1-12).tar
mkdir -p "$root"
if [[ -f $rootfs_cache ]]; then
    log "root file system from the cache ($rootfs_cache)"
    tar -C "$root" -xpf "$rootfs_cache"
else
    log "debootstrap $LAB_SUITE from $LAB_MIRROR (minbase + $PACKAGES)"
    debootstrap --variant=minbase --include="$PACKAGES" "$LAB_SUITE" "$root" "$LAB_MIRROR" \
        >"$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
    tar -C "$root" -cpf "$rootfs_cache.tmp" . && mv "$rootfs_cache.tmp" "$rootfs_cache"
    log "cached the root file system as $rootfs_cache"
fi

# The apt sources of the guest; written before the extra packages so they come from the same suites.
cat >"$root/etc/apt/sources.list" <<APT
deb $LAB_MIRROR $LAB_SUITE main
deb $LAB_MIRROR $LAB_SUITE-updates main
deb http://security.debian.org/debian-security $LAB_SUITE-security main
APT

# The project's own Debian packages, installed here at native speed: under software emulation the
# guest's `make install` spends ~20 min in dpkg otherwise. The guest's make install then finds them
# installed.
if [[ -n $LAB_BOX_EXTRA_PACKAGES ]]; then
    extras_cache=$LAB_BOX_DIR/extras-$(printf '%s' "$LAB_BOX_EXTRA_PACKAGES" | tr ' ' '\n' | sort -u | sha256sum | cut -c1-12)-${rootfs_cache##*/}
    if [[ -f $extras_cache ]]; then
        log "extra packages from the cache ($extras_cache)"
        rm -rf "$root" && mkdir -p "$root"
        tar -C "$root" -xpf "$extras_cache"
    else
        log "installing the extra packages in the chroot: $LAB_BOX_EXTRA_PACKAGES"
        chroot_enter
        # shellcheck disable=SC2086  # a list of package names
        if ! { chroot "$root" apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -qq --no-install-recommends \
                $LAB_BOX_EXTRA_PACKAGES; } >"$work/extras.log" 2>&1; then
            tail -n 30 "$work/extras.log" >&2
            die "installing the extra packages failed"
        fi
        chroot "$root" apt-get clean
        chroot_leave
        tar -C "$root" -cpf "$extras_cache.tmp" . && mv "$extras_cache.tmp" "$extras_cache"
        log "cached the root file system with the extra packages as $extras_cache"
    fi
fi

# The project's venv, installed here from the host's wheelhouse where the guests' `make install` makes
# it ($LAB_BOX_SRC/.venv, which the rsynced folder excludes and so keeps), and the kubectl 1.20 .deb
# it unpacks: under emulation creating the venv and installing ~55 wheels takes the guest 10+ min,
# here seconds. make install in the guest then only adds the project itself (pip install -e).
if [[ -n $LAB_BOX_WHEELS ]]; then
    [[ -f $LAB_BOX_WHEELS/requirements.txt ]] || die "$LAB_BOX_WHEELS is not a wheelhouse (host/wheelhouse.sh)"
    log "the project's venv in $LAB_BOX_SRC/.venv from $LAB_BOX_WHEELS"
    chroot_enter
    mkdir -p "$root/tmp/lab-wheels" "$root$LAB_BOX_SRC/.cache/debs"
    mount --bind "$LAB_BOX_WHEELS" "$root/tmp/lab-wheels"
    pip=("$LAB_BOX_SRC/.venv/bin/pip" install -q --no-index --find-links /tmp/lab-wheels)
    if ! { chroot "$root" python3 -m venv "$LAB_BOX_SRC/.venv" &&
        chroot "$root" env PIP_CONFIG_FILE=/dev/null "${pip[@]}" --upgrade pip &&
        chroot "$root" env PIP_CONFIG_FILE=/dev/null "${pip[@]}" -r /tmp/lab-wheels/requirements.txt &&
        chroot "$root" apt-get update -qq &&
        chroot "$root" sh -c "cd $LAB_BOX_SRC/.cache/debs && apt-get download -qq kubernetes-client"; } \
        >"$work/venv.log" 2>&1; then
        tail -n 30 "$work/venv.log" >&2
        umount "$root/tmp/lab-wheels"
        die "preparing the venv failed"
    fi
    umount "$root/tmp/lab-wheels"
    rmdir "$root/tmp/lab-wheels"
    chroot_leave
fi

log "configuring the guest"
uuid=$(cat /proc/sys/kernel/random/uuid)
echo debian12 >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tdebian12\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
printf 'UUID=%s\t/\text4\terrors=remount-ro\t0\t1\n' "$uuid" >"$root/etc/fstab"
cat >"$root/etc/network/interfaces" <<NET
auto lo
iface lo inet loopback

allow-hotplug eth0
iface eth0 inet dhcp
NET
# The extra CAs (a TLS-intercepting proxy's, say), where provision/common.sh puts them: trusted from the
# first boot, and common.sh finds them in place (update-ca-certificates takes minutes under emulation).
if ((${#ca_certs[@]})); then
    for crt in "${ca_certs[@]}"; do
        install -D -m 0644 "$crt" "$root/usr/local/share/ca-certificates/lab-${crt##*/}"
    done
    chroot "$root" update-ca-certificates >/dev/null
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$root/etc/pip.conf"
    log "trusting ${#ca_certs[@]} extra CA(s) from $LAB_BOX_CA_CERTS"
fi
for unit in $LAB_BOX_DISABLE_UNITS; do
    if [[ -e $root/lib/systemd/system/$unit ]]; then chroot "$root" systemctl disable --quiet "$unit" 2>/dev/null || :; fi
done
chroot "$root" useradd -m -s /bin/bash -G sudo vagrant
echo 'vagrant:vagrant' | chroot "$root" chpasswd
echo 'root:vagrant' | chroot "$root" chpasswd
install -m 0440 /dev/stdin "$root/etc/sudoers.d/vagrant" <<<'vagrant ALL=(ALL) NOPASSWD:ALL'
install -d -m 0700 "$root/home/vagrant/.ssh"
install -m 0600 "$LAB_VAGRANT_PUBKEY" "$root/home/vagrant/.ssh/authorized_keys"
chroot "$root" chown -R vagrant:vagrant /home/vagrant/.ssh
echo 'UseDNS no' >"$root/etc/ssh/sshd_config.d/vagrant.conf"
# Every VM made from the box gets its own identity: no shared host keys or machine-id.
rm -f "$root"/etc/ssh/ssh_host_*
cat >"$root/etc/systemd/system/ssh-host-keys.service" <<UNIT
[Unit]
Description=Generate this machine's SSH host keys
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=ssh.service
UNIT
mkdir -p "$root/etc/systemd/system/ssh.service.wants"
ln -sf /etc/systemd/system/ssh-host-keys.service "$root/etc/systemd/system/ssh.service.wants/"
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/*

kernel=$(find "$root/boot" -maxdepth 1 -name "vmlinuz-*" -printf "%f\n" | sort -V | tail -n 1)
initrd=initrd.img-${kernel#vmlinuz-}
[[ -f $root/boot/$initrd ]] || die "no $initrd in the root file system"
mkdir -p "$root/boot/grub"
cp -r "$GRUB_DIR" "$root/boot/grub/"
cat >"$root/boot/grub/grub.cfg" <<GRUB
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
set timeout=1
menuentry "Debian 12 (nodeagent lab box)" {
    linux /boot/$kernel root=UUID=$uuid ro console=tty0 console=ttyS0,115200 net.ifnames=0 biosdevname=0
    initrd /boot/$initrd
}
GRUB

log "disk image: ${LAB_BOX_SIZE_GB} GiB, one ext4 partition from 1 MiB, GRUB in the MBR gap"
size_mib=$((LAB_BOX_SIZE_GB * 1024))
truncate -s "${size_mib}M" "$work/disk.raw"
printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk -q "$work/disk.raw"
truncate -s "$((size_mib - 1))M" "$work/part.img"
mke2fs -q -t ext4 -U "$uuid" -L root -d "$root" "$work/part.img"
dd if="$work/part.img" of="$work/disk.raw" bs=1M seek=1 conv=notrunc,sparse status=none
rm -f "$work/part.img"
grub-mkimage -O i386-pc -o "$work/core.img" -p '(hd0,msdos1)/boot/grub' \
    biosdisk part_msdos ext2 normal linux configfile search echo test gzio boot serial terminal
(($(stat -c %s "$work/core.img") < 1048576 - 512)) || die "GRUB's core.img does not fit before the partition"
dd if="$GRUB_DIR/boot.img" of="$work/disk.raw" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$work/disk.raw" bs=512 seek=1 conv=notrunc status=none

log "packing $LAB_BOX_FILE"
qemu-img convert -O qcow2 "$work/disk.raw" "$work/box.img"
rm -f "$work/disk.raw"
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' "$LAB_BOX_SIZE_GB" >"$work/metadata.json"
cat >"$work/Vagrantfile" <<'BOX'
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |libvirt|
    libvirt.disk_bus = "virtio"
  end
end
BOX
tar -C "$work" -cf "$LAB_BOX_FILE.tmp" metadata.json Vagrantfile box.img
mv "$LAB_BOX_FILE.tmp" "$LAB_BOX_FILE"
echo "$inputs" >"$LAB_BOX_FILE.inputs"
log "done: $LAB_BOX_FILE ($(du -h "$LAB_BOX_FILE" | cut -f1)); use it with LAB_BOX=nodeagent/debian12 LAB_BOX_URL=file://$LAB_BOX_FILE"
