# Two entry points for a fresh Debian 12 / Ubuntu 24.04 machine, as root:
#   make demo   installs what is missing, runs experiments/demo.yaml on the embedded target
#   make test   installs what is missing, runs the whole pytest suite
# Both are idempotent: the second run installs nothing.

SHELL := /bin/bash
# Mininet is a Debian package for Debian's own python3: the venv is built on
# that interpreter but sees none of its system packages (Debian's python3-scapy
# 2.5 or python3-grpcio must not stand in for what pyproject.toml asks for);
# only Mininet's package directory is linked into the venv.
SYSTEM_PYTHON := /usr/bin/python3
# Machine-local settings: the Vagrant lab's provisioning writes VENV there, so
# the VM's venv and install stamps stay outside the folder it shares with the host.
MAKE_CONF ?= /etc/fabric-emu.mk
-include $(MAKE_CONF)
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PACKAGES := mininet iproute2 iputils-ping iptables ethtool procps util-linux python3-venv python3-pip \
                python3-thrift ruby shellcheck openssh-client openssh-server sudo tshark \
                chromium chromium-driver
APT_STAMP := $(VENV)/.apt-done
PIP_STAMP := $(VENV)/.pip-done
OUT ?= results

.PHONY: all setup demo test test-unit test-fast bench clean-fabric lint p4 doctor docs distclean

all: demo

setup: $(PIP_STAMP)

$(APT_STAMP):
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "make: need root to install:$$missing" >&2; exit 1; fi; \
	  echo "apt: installing$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@test -x $(SYSTEM_PYTHON) || { echo "make: $(SYSTEM_PYTHON) missing" >&2; exit 1; }
	@mkdir -p $(VENV) && touch $@

$(PIP_STAMP): $(APT_STAMP) pyproject.toml Makefile $(wildcard proto/p4/*/*.proto proto/p4/*/*/*.proto proto/gnmi/*.proto)
	@# a venv of an older layout saw every system package: build it anew
	@if grep -qs '^include-system-site-packages = true' $(VENV)/pyvenv.cfg; then \
	  echo "venv: rebuilding $(VENV) without system site packages"; rm -rf $(VENV); mkdir -p $(VENV); touch $(APT_STAMP); fi
	@test -x $(PY) || $(SYSTEM_PYTHON) -m venv $(VENV)
	@site=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	 mn=$$($(SYSTEM_PYTHON) -c 'import mininet, os; print(os.path.dirname(mininet.__file__))') && \
	 ln -sfn "$$mn" "$$site/mininet"
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@# PyPI's p4runtime (an older venv's) would shadow the bindings generated from proto/
	@$(PY) -m pip uninstall -q -y p4runtime >/dev/null 2>&1 || true
	@$(PY) -m emulator.p4.bindings >/dev/null
	@# bytecode for every module now: an environment with PYTHONDONTWRITEBYTECODE
	@# would compile the runner's and fork server's ~100 modules at each launch (0.1 s)
	@$(PY) -m compileall -q emulator >/dev/null
	@touch $@

demo: setup
	$(VENV)/bin/fabric-emu run experiments/demo.yaml --out $(OUT)/demo

test: setup
	$(PY) -m pytest -q --durations=25 tests

test-unit: setup
	$(PY) -m pytest -q tests/unit

# Everything that needs neither root nor network namespaces (no Mininet, no
# veths, no BMv2); runs as any user in under a minute.
test-fast: setup
	$(PY) -m pytest -q -m "not netns" tests

bench: setup
	$(PY) bench/forwarding.py
	$(PY) bench/demo_run.py
	$(PY) bench/frame_cost.py
	$(PY) bench/experiments.py

# What this machine has: the venv's packages, Mininet, tshark, p4c, BMv2 (one
# line each; exit 1 on a problem). The lab runs it with DOCTOR_ARGS="--require bmv2".
doctor: setup
	$(VENV)/bin/fabric-emu doctor $(DOCTOR_ARGS)

# The docs site into site/ (mkdocs.yml; the reference pages are generated from
# the code at each build); --strict: a broken link or a missing page fails.
docs: setup
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict --site-dir site

# The package's layers (pyproject.toml [tool.importlinter]); make test runs it too.
lint: setup
	$(VENV)/bin/lint-imports

clean-fabric: setup
	$(VENV)/bin/fabric-emu clean

# Compile the P4 program where p4c is installed (the Vagrant VM); the
# embedded target and the controller use the committed P4Info either way.
p4:
	@command -v p4c-bm2-ss >/dev/null || { echo "make p4: p4c-bm2-ss is not installed (it comes with the Vagrant VM lab: docs/tutorials/vagrant-lab.md)" >&2; exit 1; }
	mkdir -p build
	p4c-bm2-ss --arch v1model -o build/fabric.json --p4runtime-files build/fabric.p4info.txtpb p4src/fabric.p4

distclean:
	rm -rf $(VENV) build results site
