#!/usr/bin/env bash
# Provisioning of the ai-fabric-emulator lab (the Vagrantfile runs it as root
# inside the VM), and of any machine of a supported release that should have
# the P4 toolchain (p4c, BMv2's simple_switch_grpc with Thrift and PI).
#
#   provision.sh                    toolchain, the project's venv, `fabric-emu doctor`, `make test`
#   provision.sh --toolchain        the toolchain only (p4c, BMv2, PI), then its versions
#   provision.sh --plan [RELEASE]   print what would run for RELEASE (default: every supported
#                                   release); changes nothing, needs no root
#
# Where the toolchain comes from, per release (the release is /etc/os-release's ID-VERSION_ID):
#   ubuntu-22.04  p4lang's packages (openSUSE Build Service, home:p4lang/xUbuntu_22.04)
#   ubuntu-24.04  built from the pinned release tags below: p4lang publishes no p4lang-bmv2 for
#                 24.04 (p4c pull request #5047); p4lang/tutorials' 24.04 VM builds from source too
#   debian-12     built from the same tags (no p4lang packages for Debian)
# The source builds take grpc, protobuf, Thrift and nanomsg from the release's own packages
# (grpc 1.51 / protobuf 3.21 on both 24.04 and Debian 12, as p4lang/tutorials' 24.04 VM does).
# Nothing built here goes into the project's tree: sources under $SRC_DIR, installs under /usr/local.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

# Pinned release tags of the source builds (change together, then re-provision).
P4C_TAG="v1.2.5.16"
BMV2_TAG="1.15.5"
PI_TAG="v0.1.2"

SUPPORTED_RELEASES="ubuntu-22.04 ubuntu-24.04 debian-12"
P4LANG_OBS="https://download.opensuse.org/repositories/home:/p4lang"
PROJECT_DIR="${PROJECT_DIR:-/vagrant}"
# The lab's venv and install stamps live outside the shared folder, so a host that ran
# `make setup` does not hand its venv to the VM (the Makefile reads $MAKE_CONF).
LAB_VENV="${LAB_VENV:-/opt/fabric-emu/venv}"
MAKE_CONF="${MAKE_CONF:-/etc/fabric-emu.mk}"
SRC_DIR="${SRC_DIR:-/opt/p4lang-src}"

BASE_PACKAGES="ca-certificates curl gnupg make git python3 python3-venv python3-pip python3-thrift"
# What PI, BMv2 and p4c need to build (BMv2's install_deps.sh and p4c's README, from packages).
BUILD_PACKAGES="build-essential autoconf automake libtool libtool-bin pkg-config cmake
  bison flex libfl-dev libgc-dev libgmp-dev libboost-dev libboost-iostreams-dev libboost-graph-dev
  libboost-program-options-dev libboost-system-dev libboost-filesystem-dev libboost-thread-dev
  libboost-test-dev libevent-dev libffi-dev libjsoncpp-dev libpcap-dev libssl-dev libreadline-dev
  libxxhash-dev libnanomsg-dev libthrift-dev thrift-compiler libgrpc-dev libgrpc++-dev
  libprotobuf-dev libprotoc-dev protobuf-compiler protobuf-compiler-grpc python3-dev"
# p4c: the BMv2 back end only (fabric.p4 needs nothing else; the others double the build).
P4C_CMAKE_OPTIONS=(-DCMAKE_BUILD_TYPE=Release -DENABLE_BMV2=ON -DENABLE_EBPF=OFF -DENABLE_UBPF=OFF
  -DENABLE_DPDK=OFF -DENABLE_P4TC=OFF -DENABLE_P4FMT=OFF -DENABLE_P4TEST=OFF -DENABLE_GTESTS=OFF
  -DENABLE_P4C_GRAPHS=OFF -DENABLE_TEST_TOOLS=OFF)
# More cmake options for p4c from the environment, e.g. for a machine without internet access
# (p4c fetches protobuf 25.3, abseil 20240722.1, p4runtime and bdwgc; Debian's libgc will do):
#   -DFETCHCONTENT_SOURCE_DIR_PROTOBUF=DIR -DFETCHCONTENT_SOURCE_DIR_ABSEIL=DIR
#   -DFETCHCONTENT_SOURCE_DIR_P4RUNTIME=DIR -DFETCHCONTENT_FULLY_DISCONNECTED=ON -DP4C_USE_PREINSTALLED_BDWGC=ON
# (clones of the sources at those tags; the p4runtime commit is the one PI's submodule pins)
P4C_CMAKE_EXTRA="${P4C_CMAKE_EXTRA:-}"

PLAN=0

die() { echo "provision.sh: $*" >&2; exit 1; }

# One step: printed in plan mode (quoted as a shell would need it), run (and echoed) otherwise.
run() {
  local shown
  shown=$(printf '%q ' "$@")
  if [ "${PLAN}" = 1 ]; then
    echo "    ${shown% }"
  else
    echo "+ ${shown% }"
    "$@"
  fi
}

# A step that needs the shell (pipes, redirections).
run_sh() {
  if [ "${PLAN}" = 1 ]; then
    echo "    $1"
  else
    echo "+ $1"
    bash -c "$1"
  fi
}

toolchain_source() {            # RELEASE -> packages | source
  case "$1" in
    ubuntu-22.04) echo packages ;;
    ubuntu-24.04 | debian-12) echo source ;;
    *) return 1 ;;
  esac
}

# Parallel jobs: one per core, at most one per 2 GB of memory (p4c's units are large).
build_jobs() {
  local cores mem_gb
  cores=$(nproc 2>/dev/null || echo 1)
  mem_gb=$(awk '/MemTotal/ { print int($2 / 1048576) }' /proc/meminfo 2>/dev/null || echo 2)
  local by_mem=$((mem_gb / 2))
  [ "${by_mem}" -lt 1 ] && by_mem=1
  [ "${cores}" -lt "${by_mem}" ] && echo "${cores}" || echo "${by_mem}"
}

install_packaged_toolchain() {  # RELEASE
  local version="${1#ubuntu-}"
  local repo="${P4LANG_OBS}/xUbuntu_${version}"
  local keyring=/etc/apt/keyrings/home_p4lang.gpg
  run install -d -m 0755 /etc/apt/keyrings
  run_sh "curl -fsSL '${repo}/Release.key' | gpg --dearmor --yes -o '${keyring}'"
  run_sh "echo 'deb [signed-by=${keyring}] ${repo}/ /' > /etc/apt/sources.list.d/home_p4lang.list"
  run apt-get update -qq
  run apt-get install -y -qq p4lang-pi p4lang-bmv2 p4lang-p4c
}

# Clone REPO at TAG into $SRC_DIR/NAME-TAG (shallow, with its submodules) unless built before.
fetch_tag() {                   # NAME REPO TAG
  local dir="${SRC_DIR}/$1-$3"
  run_sh "[ -d '${dir}' ] || git clone -q --depth 1 --branch '$3' --recurse-submodules --shallow-submodules '$2' '${dir}'"
}

build_from_source() {           # (release-independent: the packages' names match on all source releases)
  local jobs=N                  # the plan does not know the lab's cores and memory
  [ "${PLAN}" = 1 ] || jobs=$(build_jobs)
  # shellcheck disable=SC2086   # word splitting of the package list is the point
  run apt-get install -y -qq --no-install-recommends ${BUILD_PACKAGES}
  run install -d -m 0755 "${SRC_DIR}"

  fetch_tag PI https://github.com/p4lang/PI.git "${PI_TAG}"
  run_sh "cd '${SRC_DIR}/PI-${PI_TAG}' && [ -e .built ] || { ./autogen.sh && ./configure --with-proto --without-internal-rpc --without-cli --without-bmv2 && make -j${jobs} && make install && ldconfig && touch .built; }"

  fetch_tag behavioral-model https://github.com/p4lang/behavioral-model.git "${BMV2_TAG}"
  run_sh "cd '${SRC_DIR}/behavioral-model-${BMV2_TAG}' && [ -e .built ] || { ./autogen.sh && ./configure --with-pi --with-thrift && make -j${jobs} && make install && ldconfig && touch .built; }"

  fetch_tag p4c https://github.com/p4lang/p4c.git "${P4C_TAG}"
  # GCC 12 (Debian 12) refuses two lambdas of p4c's ir/visitor.cpp that take a map entry by
  # non-const reference (erase_if hands them a const one); const is what they need. No-op on GCC 13.
  run sed -i 's/\[this\](flow_join_points_t::value_type &el)/[this](const flow_join_points_t::value_type \&el)/' \
    "${SRC_DIR}/p4c-${P4C_TAG}/ir/visitor.cpp"
  run_sh "cd '${SRC_DIR}/p4c-${P4C_TAG}' && [ -e .built ] || { mkdir -p build && cd build && cmake .. ${P4C_CMAKE_OPTIONS[*]} ${P4C_CMAKE_EXTRA} && make -j${jobs} && make install && ldconfig && touch ../.built; }"
}

install_toolchain() {           # RELEASE
  run apt-get update -qq
  # shellcheck disable=SC2086
  run apt-get install -y -qq --no-install-recommends ${BASE_PACKAGES}
  case "$(toolchain_source "$1")" in
    packages) install_packaged_toolchain "$1" ;;
    source) build_from_source ;;
  esac
  # What was installed, whichever way.
  run_sh "p4c --version | head -1; simple_switch_grpc --version; pkg-config --modversion pi 2>/dev/null || ls /usr/lib/libpi.so* /usr/local/lib/libpi.so* 2>/dev/null | head -1"
}

install_project() {
  run_sh "echo 'VENV := ${LAB_VENV}' > '${MAKE_CONF}'"
  run install -d -m 0755 "$(dirname "${LAB_VENV}")"
  run make -C "${PROJECT_DIR}" setup
  run make -C "${PROJECT_DIR}" p4
  # One line per problem; with --require bmv2 a lab without a working BMv2 fails here.
  run make -C "${PROJECT_DIR}" doctor DOCTOR_ARGS="--require bmv2"
  run make -C "${PROJECT_DIR}" test
}

plan() {                        # RELEASE...
  local release
  PLAN=1
  for release in "$@"; do
    toolchain_source "${release}" >/dev/null ||
      die "--plan: ${release} is not a supported release (${SUPPORTED_RELEASES})"
    case "$(toolchain_source "${release}")" in
      packages) echo "${release}: toolchain from p4lang's packages (their current versions)" ;;
      source) echo "${release}: toolchain built from p4c ${P4C_TAG}, BMv2 ${BMV2_TAG}, PI ${PI_TAG}" ;;
    esac
    install_toolchain "${release}"
    echo "  project (the lab):"
    install_project
  done
}

this_release() {
  # shellcheck source=/dev/null
  . /etc/os-release
  echo "${ID:-unknown}-${VERSION_ID:-unknown}"
}

main() {
  case "${1:-}" in
    --plan)
      shift
      if [ $# -eq 0 ]; then
        # shellcheck disable=SC2086
        set -- ${SUPPORTED_RELEASES}
      fi
      plan "$@"
      return
      ;;
    --toolchain | "") ;;
    *) die "unknown argument '$1' (--plan [RELEASE] | --toolchain)" ;;
  esac
  [ "$(id -u)" = 0 ] || die "run as root (the Vagrantfile does)"
  local release
  release=$(this_release)
  toolchain_source "${release}" >/dev/null ||
    die "${release} is not a supported release (${SUPPORTED_RELEASES}); see --plan"
  echo "provision.sh: ${release}, toolchain from $(toolchain_source "${release}")"
  install_toolchain "${release}"
  [ "${1:-}" = --toolchain ] && return
  install_project
}

main "$@"
