#!/usr/bin/env bash
# Installs exactly the Debian 12 packages PETRA fleet needs to build, test and run.
# Idempotent: packages already present are skipped, and apt is not touched when
# nothing is missing. Run as root (or with sudo available).
set -euo pipefail

# One source of truth for the package lists: CI (scripts/test.sh), the
# README's commands and the container image (deploy/docker/Dockerfile) all
# install through this script.
# build: what compiles PETRA fleet.
BUILD_PACKAGES=(
  g++ cmake make ninja-build pkg-config ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev libabsl-dev zlib1g-dev libssl-dev
  libjpeg62-turbo-dev libpng-dev libgoogle-glog-dev libyaml-cpp-dev
)
# runtime: what the programs need beyond the libraries they link (those are
# listed by scripts/runtime-packages.sh): libtorch's BLAS backend, the fast
# multi-threaded OpenBLAS rather than the reference BLAS; SentencePiece's
# tools, which train and run the sentencepiece tokenizer in processes of
# their own (services/data/tokenizer.cc says why not in ours).
RUNTIME_PACKAGES=(libopenblas0-pthread sentencepiece)
BUILD_PACKAGES+=("${RUNTIME_PACKAGES[@]}")
# PETRA_TORCH other than debian: a libtorch of your own (a CUDA build) is
# used instead of Debian's CPU-only one (scripts/build.sh says how).
# Debian's libtorch-dev leaves out the Gloo headers that torch's c10d
# headers include (replicas average their gradients with ProcessGroupGloo).
if [[ "${PETRA_TORCH:-debian}" == debian ]]; then
  BUILD_PACKAGES+=(libtorch-dev libgloo-dev)
fi
# test: the test suite's tools. Python's torch.load must read what
# `petra export` writes; a real Prometheus (and promtool) must scrape and
# accept our metrics; the deployment tests render the compose file and read
# YAML, and validate the Kubernetes manifests with npm packages; the
# security tests make certificates with openssl (scripts/make-certs.sh);
# the fuzz targets need clang with libFuzzer and the sanitizer runtimes
# (scripts/fuzz.sh); the Python package (python/) runs on Debian's gRPC
# and protobuf, and its tests install it into a venv with pip; the image
# folder tests write their JPEGs and PNGs with Pillow; petra.models
# encodes with a language model's SentencePiece tokenizer; petra plot and
# petra.plot draw with matplotlib; scripts/compose-live.sh runs the compose
# fleet in containers on its own Docker daemon (docker.io), from a base
# image debootstrap makes.
TEST_PACKAGES=(
  libgtest-dev libgmock-dev python3-yaml prometheus docker-compose openssl
  docker.io debootstrap curl
  clang-14 libclang-rt-14-dev python3-grpcio python3-protobuf python3-pip
  python3-venv python3-setuptools python3-pil python3-sentencepiece
  python3-matplotlib
)
if [[ "${PETRA_TORCH:-debian}" == debian ]]; then
  TEST_PACKAGES+=(python3-torch)
fi
# A Node.js from elsewhere (NodeSource) already brings npm; Debian's nodejs
# needs its npm package.
if ! command -v npm >/dev/null 2>&1; then
  TEST_PACKAGES+=(npm)
fi
# data: the default training set (Fashion-MNIST in /usr/share/datasets),
# and the language models' default corpus (text_corpus below).
DATA_PACKAGES=(dataset-fashion-mnist)
TEXT_CORPUS=/usr/share/dictd/gcide.dict.dz
want_text=0

usage() {
  cat <<USAGE
Usage: scripts/install-deps.sh [--only GROUPS] [--add-from FILE] [--list]

Installs the Debian packages PETRA fleet needs, skipping those present.
  --only GROUPS    comma-separated subset of: build, runtime, test, data
                   (default: build,test,data; build includes runtime)
  --add-from FILE  also install the packages listed in FILE, one per line
                   (the container image's runtime libraries)
  --list           print the selected packages and exit
  --help           show this help
Environment: PETRA_TORCH other than debian skips Debian's libtorch (bring
your own; scripts/build.sh).
USAGE
}

groups="build,test,data"
extra_file=""
list_only=0
while (($#)); do
  case "$1" in
    --help|-h) usage; exit 0 ;;
    --list) list_only=1 ;;
    --only)
      [[ $# -ge 2 ]] || { echo "install-deps.sh: --only needs a value" >&2; exit 2; }
      groups="$2"; shift ;;
    --add-from)
      [[ $# -ge 2 ]] || { echo "install-deps.sh: --add-from needs a file" >&2; exit 2; }
      extra_file="$2"; shift ;;
    *) echo "install-deps.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

PACKAGES=()
IFS=',' read -r -a selected <<<"$groups"
for g in "${selected[@]}"; do
  case "$g" in
    build) PACKAGES+=("${BUILD_PACKAGES[@]}") ;;
    runtime) PACKAGES+=("${RUNTIME_PACKAGES[@]}") ;;
    test) PACKAGES+=("${TEST_PACKAGES[@]}") ;;
    data) PACKAGES+=("${DATA_PACKAGES[@]}"); want_text=1 ;;
    *) echo "install-deps.sh: unknown group '$g' (expected build, runtime, test or data)" >&2; exit 2 ;;
  esac
done
if [[ -n "$extra_file" ]]; then
  [[ -r "$extra_file" ]] || { echo "install-deps.sh: cannot read '$extra_file'" >&2; exit 2; }
  while read -r p; do
    [[ -n "$p" && "$p" != \#* ]] && PACKAGES+=("$p")
  done <"$extra_file"
fi
if ((list_only)); then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null; then SUDO=sudo; fi

# The language models' default corpus (DATASET_KIND_TEXT): GCIDE, 40 MB of
# English text, from Debian's dict-gcide. Its dictionary file is unpacked
# to where the package puts it; the package itself is not installed, as it
# depends on a dictionary server (dictd), a daemon the corpus does not need.
text_corpus() {
  ((want_text)) && [[ ! -f "$TEXT_CORPUS" ]] || return 0
  local tmp
  tmp=$(mktemp -d)
  echo "install-deps: unpacking dict-gcide's $TEXT_CORPUS (the text corpus)"
  if ! (cd "$tmp" && apt-get download -q dict-gcide >/dev/null 2>&1); then
    $SUDO apt-get update -q
    (cd "$tmp" && apt-get download -q dict-gcide)
  fi
  dpkg-deb -x "$tmp"/dict-gcide_*.deb "$tmp/root"
  $SUDO install -D -m 644 "$tmp/root$TEXT_CORPUS" "$TEXT_CORPUS"
  $SUDO install -D -m 644 "$tmp/root/usr/share/doc/dict-gcide/copyright" \
    /usr/share/doc/dict-gcide/copyright
  rm -rf "$tmp"
}

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  text_corpus
  exit 0
fi

if [[ $(id -u) -ne 0 && -z "$SUDO" ]]; then
  echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${#missing[@]} package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
text_corpus
echo "install-deps: done"
