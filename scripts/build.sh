#!/usr/bin/env bash
# Installs the Debian packages (scripts/install-deps.sh), configures and
# builds PETRA fleet into build/ (binaries in build/bin/).
# Environment: BUILD_DIR (default build), BUILD_TYPE (default Release),
# JOBS (default 2: one torch translation unit needs ~1.5 GB),
# PETRA_SKIP_INSTALL=1 to skip the package step, CMAKE_ARGS for extra
# configure arguments, PETRA_TORCH for the libtorch to build against:
#   debian    Debian's, CPU-only (the default; installed by install-deps.sh)
#   python    the Python torch's (torch.utils.cmake_prefix_path), e.g. a CUDA
#             wheel on a GPU host (scripts/gpu/build.sh)
#   DIR       a libtorch folder (it holds share/cmake/Torch)
#   external  yours, named by -DTorch_DIR=... in CMAKE_ARGS
# A libtorch with CUDA (lib/libtorch_cuda.so) builds with PETRA_WITH_CUDA.
# Use one BUILD_DIR per libtorch: a configured directory keeps its Torch_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}
JOBS=${JOBS:-2}

if [[ "${PETRA_SKIP_INSTALL:-0}" != 1 ]]; then
  bash scripts/install-deps.sh
fi

torch_args=()
torch_dir=
case "${PETRA_TORCH:-debian}" in
  debian|external) ;;
  python)
    torch_dir=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null) || {
      echo "build: PETRA_TORCH=python: python3 cannot import torch" >&2; exit 2; }
    torch_dir=$torch_dir/Torch ;;
  *) torch_dir=$PETRA_TORCH/share/cmake/Torch ;;
esac
if [[ -n "$torch_dir" ]]; then
  if [[ ! -f "$torch_dir/TorchConfig.cmake" ]]; then
    echo "build: PETRA_TORCH=$PETRA_TORCH: no TorchConfig.cmake in $torch_dir" >&2
    exit 2
  fi
  torch_args+=("-DTorch_DIR=$torch_dir")
  if [[ -e "$torch_dir/../../../lib/libtorch_cuda.so" ]]; then
    torch_args+=(-DPETRA_WITH_CUDA=ON)
    echo "build: CUDA libtorch at $torch_dir"
  fi
fi

echo "build: configuring ${BUILD_DIR} (${BUILD_TYPE})"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  ${torch_args[@]+"${torch_args[@]}"} ${CMAKE_ARGS:-}
echo "build: compiling with ${JOBS} jobs"
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "build: binaries in ${BUILD_DIR}/bin"
