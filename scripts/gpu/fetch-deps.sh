#!/usr/bin/env bash
# Run on the Debian 12 build machine (it has apt): downloads, into .gpu/debs
# (git-ignored), the Debian packages a GPU host needs to build PETRA fleet
# against its own CUDA libtorch: gRPC, protobuf, Abseil, prometheus-cpp,
# glog, libjpeg-turbo, libpng, yaml-cpp, GoogleTest, OpenSSL and zlib, headers and
# libraries, with the libraries
# they load. Not the C runtime, the compiler or CMake: the GPU host has its
# own, and a second libc on the library path would break every program.
# scripts/gpu/build.sh unpacks them there (docs/GPU.md).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [[ "${1:-}" == --help || "${1:-}" == -h ]]; then
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi

OUT=.gpu/debs
# What the build names (scripts/install-deps.sh's build list, without
# libtorch, plus the test framework).
ROOTS=(
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev libabsl-dev zlib1g-dev libssl-dev libgtest-dev
  libgmock-dev libgoogle-glog-dev libjpeg62-turbo-dev libpng-dev
  libyaml-cpp-dev
)
# The host's own: the C and C++ runtimes, kernel headers and the toolchain.
HOST_HAS='^(libc6|libc6-dev|libc-dev-bin|libgcc-s1|gcc-12-base|libstdc\+\+6|linux-libc-dev|libcrypt1|libcrypt-dev|libnsl2|libnsl-dev|libtirpc3|libtirpc-dev|libtirpc-common|rpcsvc-proto|pkgconf|pkgconf-bin|libpkgconf3)$'

command -v apt-get >/dev/null || { echo "fetch-deps: needs apt-get (Debian 12)" >&2; exit 2; }
mapfile -t packages < <(
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${ROOTS[@]}" |
    grep -v '^[ <]' | sort -u | grep -Ev "$HOST_HAS")
[[ ${#packages[@]} -gt 0 ]] || { echo "fetch-deps: apt found no packages (run apt-get update?)" >&2; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT"
echo "fetch-deps: downloading ${#packages[@]} packages into $OUT"
(cd "$OUT" && apt-get download "${packages[@]}" 2>&1 >/dev/null | grep -v "unsandboxed as root" || true)
got=$(find "$OUT" -name '*.deb' | wc -l)
if (( got != ${#packages[@]} )); then
  echo "fetch-deps: downloaded $got of ${#packages[@]} packages (apt-get update first?)" >&2
  exit 1
fi
total=$(du -sb "$OUT" | cut -f1)
echo "fetch-deps: $(ls "$OUT" | wc -l) files, $((total / 1048576)) MiB (the device tool carries 64 MiB with the tree)"
if (( total > 56 * 1048576 )); then
  echo "fetch-deps: too large to carry next to the working tree" >&2
  exit 1
fi
