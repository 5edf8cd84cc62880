#!/bin/bash
# The CUDA compile check (issue 48, item 2; docs/GPU.md, "What the CPU
# machine checks of the CUDA code"): compiles transport cuda_ipc's CUDA
# runtime layer (services/link/cuda_ipc_device.cc) with -Werror against the
# CUDA runtime headers of Debian's own archive (nvidia-cuda-dev 11.8, in its
# non-free component), links it with the protocol code above it and
# libcudart, and runs the result: with no GPU it must say so cleanly. It
# catches a wrong CUDA call, signature, type, constant or library; it
# cannot catch what needs a GPU (a CUDA libtorch, the driver, two
# processes mapping each other's memory: the gpu tests).
#
# The packages are downloaded (apt-get download, 774 MB, seconds from the
# archive) into $CUDA_CHECK_CACHE and unpacked, headers and libcudart only
# (14 MB), into $CUDA_CHECK_DIR: nothing is installed, as nvidia-cuda-dev's
# driver dependency cannot be on a machine without the driver. The
# archive's non-free component is added to apt's sources for the download.
#
#   bash scripts/cuda-compile-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "cuda-compile-check: $*"; }
cache=${CUDA_CHECK_CACHE:-/var/cache/petra-cuda}
work=${CUDA_CHECK_DIR:-build-cuda-check}
mkdir -p "$cache" "$work"
cache=$(cd "$cache" && pwd)
work=$(cd "$work" && pwd)

if ! ls "$cache"/nvidia-cuda-dev_*.deb "$cache"/libcudart11.0_*.deb > /dev/null 2>&1; then
  src=/etc/apt/sources.list.d/petra-cuda-non-free.sources
  # A name apt knows without a version to fetch (another package names it)
  # is not enough: ask for a candidate.
  if ! apt-cache policy nvidia-cuda-dev 2> /dev/null | grep -q 'Candidate: [0-9]'; then
    if [ "$(id -u)" != 0 ]; then
      say "nvidia-cuda-dev is not in apt's sources, and adding them needs root"
      exit 2
    fi
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2> /dev/null || true)
    printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "${uri:-http://deb.debian.org/debian}" > "$src"
    say "added $src (the Debian archive's non-free component)"
    apt-get update -qq
  fi
  say "downloading nvidia-cuda-dev and libcudart11.0 (774 MB) into $cache"
  if ! (cd "$cache" && apt-get download -qq nvidia-cuda-dev libcudart11.0 2> /dev/null); then
    say "apt-get download nvidia-cuda-dev libcudart11.0 failed (is Debian's archive reachable, with its non-free component?)"
    exit 3
  fi
fi
prefix=$work/cuda
if [ ! -f "$prefix/usr/include/cuda_runtime_api.h" ]; then
  say "unpacking the CUDA headers and libcudart into $prefix"
  mkdir -p "$prefix"
  # The headers are the package's first 13 MB of 2.9 GB: read the archive
  # as a stream and stop past them (tar would decompress it all, about a
  # minute of CPU taken from the build beside it). dpkg-deb then ends on a
  # closed pipe, which is expected; the header check below is what counts.
  dpkg-deb --fsys-tarfile "$cache"/nvidia-cuda-dev_*.deb 2> /dev/null | python3 -c '
import sys, tarfile
with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as archive:
    seen = False
    for member in archive:
        if member.name.startswith("./usr/include/"):
            seen = True
            archive.extract(member, sys.argv[1])
        elif seen:
            break
' "$prefix" 2> /dev/null || true
  [ -f "$prefix/usr/include/cuda_runtime_api.h" ] ||
    { say "no cuda_runtime_api.h in $(ls "$cache"/nvidia-cuda-dev_*.deb)"; exit 3; }
  dpkg-deb -x "$cache"/libcudart11.0_*.deb "$prefix"
fi
version=$(awk '/#define CUDART_VERSION/ {print $3; exit}' "$prefix/usr/include/cuda_runtime_api.h")
libdir=$prefix/usr/lib/x86_64-linux-gnu
ln -sf "$(basename "$(ls "$libdir"/libcudart.so.*.*.* | head -1)")" "$libdir/libcudart.so"

flags=(-std=c++17 -O1 -Wall -Wextra -Werror -Wno-unused-parameter -I.
       -isystem "$prefix/usr/include" -DPETRA_WITH_CUDA=1)
say "compiling cuda_ipc's CUDA layer against CUDA $version with -Werror"
objects=()
for src in services/link/cuda_ipc_device.cc services/link/ipc_device.cc \
           services/link/host_ipc_device.cc; do
  obj=$work/$(basename "$src" .cc).o
  g++ "${flags[@]}" -c "$src" -o "$obj"
  objects+=("$obj")
done
cat > "$work/probe.cc" << 'PROBE'
// Loads the CUDA runtime through cuda_ipc's layer: a GPU host names its
// GPUs; a machine without one says why, and cuda_ipc is not offered.
#include <iostream>

#include "services/link/ipc_device.h"

int main() {
  std::string why;
  petra::link::IpcDevice* d = petra::link::CudaIpcDevice(&why);
  if (d == nullptr) {
    std::cout << "no CUDA device: " << why << "\n";
    return why.empty() ? 1 : 0;
  }
  for (const auto& g : petra::link::VisibleGpus()) {
    std::cout << "GPU " << g.uuid << ", peers " << g.peers.size() << "\n";
  }
  return 0;
}
PROBE
g++ "${flags[@]}" -c "$work/probe.cc" -o "$work/probe.o"
# shellcheck disable=SC2046
g++ -o "$work/probe" "$work/probe.o" "${objects[@]}" -L"$libdir" -lcudart \
  -Wl,-rpath,"$libdir" $(pkg-config --libs absl_strings absl_status absl_statusor)
say "running the probe (no GPU here: it must say so):"
"$work/probe"
say "passed: cuda_ipc's CUDA layer compiles, links and loads against CUDA $version"
