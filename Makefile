# nodeagent: everything the project needs is installed from here (run as root).
#   make up    install, build, then run the all-in-one node in the foreground
#   make test  install, build, then ruff, the import contracts and the whole pytest suite
#   make test-fresh  the same on a host made to look fresh first (what CI runs)

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
CACHE := .cache
STAMPS := $(CACHE)/stamps

# Debian packages: kernel tools, and the real peers the tests run against.
APT_PACKAGES := iproute2 iptables nftables conntrack ipset ipvsadm kmod procps psmisc util-linux \
	busybox-static file gcc libc6-dev ca-certificates \
	containerd runc containernetworking-plugins etcd-server etcd-client docker-registry skopeo podman iperf3 \
	apache2-utils dnsmasq-base vagrant shellcheck bind9-dnsutils haproxy jq bird2
# apparmor_parser, where the kernel has AppArmor: the CRI runtime loads its default profile with it.
APT_PACKAGES += $(if $(shell grep -qs '^Y' /sys/module/apparmor/parameters/enabled && echo y),apparmor)
# Debian's kubectl 1.20, unpacked privately (installing it would replace the machine's kubectl).
KUBECTL_120 := $(CACHE)/kubectl-1.20/usr/bin/kubectl

.PHONY: all up demo-images test test-fresh install deps python build lint unit clean help cni-install cri-proto cri-bin csi-proto

help:
	@sed -n '1,4p' Makefile

all: install

install: deps python build

deps: $(STAMPS)/apt $(KUBECTL_120)

$(STAMPS)/apt: Makefile
	@mkdir -p $(STAMPS)
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@touch $@

$(KUBECTL_120): | $(STAMPS)/apt
	@mkdir -p $(CACHE)/debs
	cd $(CACHE)/debs && (ls kubernetes-client_*.deb >/dev/null 2>&1 || apt-get download -qq kubernetes-client \
		|| (apt-get update -qq && apt-get download -qq kubernetes-client))
	dpkg -x $$(ls $(CACHE)/debs/kubernetes-client_*.deb | head -1) $(CACHE)/kubectl-1.20
	@test -x $@ && touch $@

python: $(STAMPS)/python

$(STAMPS)/python: pyproject.toml
	@mkdir -p $(STAMPS)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	@touch $@

# Generated and compiled parts (CRI stubs, pause binary, CNI plugins) are added here as they land.
build: python cri-proto csi-proto cri-bin cni-install

# CRI runtime.v1 stubs, generated from the project's own proto (not committed).
CRI_PROTO_STUBS := cri/proto/api_pb2.py cri/proto/api_pb2_grpc.py
cri-proto: $(CRI_PROTO_STUBS)

$(CRI_PROTO_STUBS) &: cri/proto/api.proto | $(STAMPS)/python
	$(PY) -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. cri/proto/api.proto

# CSI v1.12.0 (the spec's own csi.proto) and the kubelet's pluginregistration/v1 stubs (not committed).
CSI_PROTOS := csi/proto/csi.proto csi/proto/pluginregistration.proto
CSI_PROTO_STUBS := $(CSI_PROTOS:.proto=_pb2.py) $(CSI_PROTOS:.proto=_pb2_grpc.py)
csi-proto: $(CSI_PROTO_STUBS)

$(CSI_PROTO_STUBS) &: $(CSI_PROTOS) | $(STAMPS)/python
	$(PY) -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. $(CSI_PROTOS)

# The runtime's static C helpers: the pod sandbox's pause process, the per-container shim, and the
# launcher that starts a container and then execs the shim.
CRI_BINS := cri/pause/pause cri/shim/shim cri/shim/launch
cri-bin: $(CRI_BINS)

cri/pause/pause: cri/pause/pause.c | $(STAMPS)/apt
	gcc -static -O2 -s -Wall -o $@ $<

cri/shim/shim: cri/shim/shim.c | $(STAMPS)/apt
	gcc -static -O2 -s -Wall -o $@ $<

cri/shim/launch: cri/shim/launch.c | $(STAMPS)/apt
	gcc -static -O2 -s -Wall -o $@ $<

# The CNI plugins (bridge: compiled thin client; others: lean Python launchers) and a default
# conflist, written only if absent. nodeagent cni-daemon serves the bridge's fast path.
CNI_BIN_DIR ?= /opt/cni/bin
CNI_CONF_DIR ?= /etc/cni/net.d
cni-install: python
	$(PY) -m cni.install --bin-dir $(CNI_BIN_DIR) --conf-dir "$(CNI_CONF_DIR)"

# ruff, then the layering contracts of pyproject.toml's [tool.importlinter] (DESIGN.md, "Layering"),
# then mypy over the whole tree ([tool.mypy]).
lint: python
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy

test: install lint
	$(PY) -m pytest tests $(PYTEST_ARGS)

# What real peers leave on first use (podman's cgroup parent, say) is removed first, so every run
# behaves as on a machine where nothing ran before (tests/harness/firstuse.py).
test-fresh: install
	$(PY) -m tests.harness.firstuse --remove
	$(MAKE) test

unit: build
	$(PY) -m pytest tests/unit --no-leak-check

up: install
	$(VENV)/bin/nodeagent up

# The walkthrough's images (localhost/busybox:latest, localhost/httpd:v1) from busybox-static: no registry.
demo-images: install
	$(VENV)/bin/nodeagent image demo

clean:
	rm -rf $(VENV) $(CACHE) build *.egg-info

# The Vagrant lab (vagrant/README.md). Opt-in, never part of `make test`: lab-deps installs the
# hypervisor side, lab-box builds a Debian 12 libvirt box offline from Debian packages, lab-test
# brings up cp + one worker with vagrant-libvirt, checks them and destroys them.
LAB_APT_PACKAGES := vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils \
	dnsmasq-base debootstrap grub-pc-bin e2fsprogs fdisk rsync openssh-client
# This host's extra CAs (a TLS-intercepting proxy's, say): baked into the box, shared with the guests.
LAB_CA_CERTS ?= $(if $(wildcard /usr/local/share/ca-certificates/*.crt),/usr/local/share/ca-certificates)
.PHONY: lab-deps lab-box lab-test
lab-deps:
	LAB_APT_PACKAGES="$(LAB_APT_PACKAGES)" vagrant/host/deps.sh

# The guests run Debian's kernel, which has AppArmor: their make install wants apparmor too, even
# where this host's kernel has none.
lab-box: lab-deps
	LAB_BOX_EXTRA_PACKAGES="$(APT_PACKAGES) $(filter-out $(APT_PACKAGES),apparmor)" LAB_BOX_CA_CERTS="$(LAB_CA_CERTS)" \
		LAB_BOX_WHEELS="$$(vagrant/host/wheelhouse.sh)" vagrant/host/build-box.sh

lab-test: lab-box
	vagrant/host/lab-test.sh
