#!/usr/bin/env bash
# Provisioning of the Vagrant lab VM (runs as root inside the VM).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq make git python3 python3-venv >/dev/null
cd /vagrant
# The same two entry points as on any machine; make installs the rest.
make setup
make test
