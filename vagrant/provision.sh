#!/usr/bin/env bash
# Provisioning of the ai-fabric-emulator lab VM (Ubuntu 24.04; runs as root
# inside the VM, from Vagrantfile). It installs:
#   - p4c (p4c-bm2-ss) and BMv2 (simple_switch_grpc, simple_switch_CLI) from
#     the p4lang project's packaged releases (openSUSE Build Service repo
#     home:p4lang), nothing built from source;
#   - the project's own environment (Mininet, the venv) through the Makefile;
# and ends with `make test`, so `vagrant up` finishes with the suite passing
# on both targets (the BMv2 tests run here; elsewhere they skip).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

P4LANG_REPO_BASE="https://download.opensuse.org/repositories/home:/p4lang"
PROJECT_DIR="${PROJECT_DIR:-/vagrant}"

# shellcheck source=/dev/null
. /etc/os-release
if [ "${ID:-}" != "ubuntu" ]; then
  echo "provision.sh: the lab is an Ubuntu VM (this is ${PRETTY_NAME:-unknown})" >&2
  exit 1
fi
repo="${P4LANG_REPO_BASE}/xUbuntu_${VERSION_ID}"

apt-get update -qq
apt-get install -y -qq --no-install-recommends ca-certificates curl gnupg make git \
  python3 python3-venv python3-pip python3-thrift >/dev/null

# The p4lang package repository, signed by its OBS key.
keyring=/etc/apt/keyrings/home_p4lang.gpg
install -d -m 0755 /etc/apt/keyrings
curl -fsSL "${repo}/Release.key" | gpg --dearmor --yes -o "${keyring}"
echo "deb [signed-by=${keyring}] ${repo}/ /" > /etc/apt/sources.list.d/home_p4lang.list
apt-get update -qq
apt-get install -y -qq p4lang-p4c p4lang-bmv2 >/dev/null

for tool in p4c-bm2-ss simple_switch_grpc simple_switch_CLI; do
  command -v "${tool}" >/dev/null || { echo "provision.sh: ${tool} missing after install" >&2; exit 1; }
done
simple_switch_grpc --version

cd "${PROJECT_DIR}"
# The same entry points as on any machine: make installs Mininet and the venv.
make setup
make p4
make test
