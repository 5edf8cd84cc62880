#!/usr/bin/env bash
# Installs exactly the Debian 12 packages PETRA fleet needs to build, test and run.
# Idempotent: packages already present are skipped, and apt is not touched when
# nothing is missing. Run as root (or with sudo available).
set -euo pipefail

# One source of truth for the package list: the Dockerfile and CI call this script.
PACKAGES=(
  # toolchain
  g++ cmake make pkg-config ca-certificates
  # libraries
  libtorch-dev libopenblas0-pthread
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev libabsl-dev zlib1g-dev libssl-dev
  # tests
  libgtest-dev libgmock-dev
  # tests: Python's torch.load must read what `petra export` writes;
  # a real Prometheus (and promtool) must scrape and accept our metrics
  python3-torch prometheus
  # data: the default training set
  dataset-fashion-mnist
)

usage() {
  cat <<USAGE
Usage: scripts/install-deps.sh [--list] [--help]

Installs the Debian packages PETRA fleet needs (skipping those present).
  --list   print the package list and exit
  --help   show this help
USAGE
}

case "${1:-}" in
  --help|-h) usage; exit 0 ;;
  --list) printf '%s\n' "${PACKAGES[@]}"; exit 0 ;;
  "") ;;
  *) echo "install-deps.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi

echo "install-deps: installing ${#missing[@]} package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
