#!/usr/bin/env bash
# Installs the Debian packages (scripts/install-deps.sh), configures and
# builds PETRA fleet into build/ (binaries in build/bin/).
#   bash scripts/build.sh              # everything: programs, tests, benchmarks
#   bash scripts/build.sh petra        # only these targets (scripts/train.sh)
# Environment: BUILD_DIR (default build), BUILD_TYPE (default Release),
# JOBS (default 2: one batch of torch sources needs ~1.6 GB),
# PETRA_SKIP_INSTALL=1 to skip the package step, PETRA_INSTALL_GROUPS (the
# install-deps.sh groups, default build,test,data), PETRA_BUILD_TESTS
# (AUTO, the default: the tests when GoogleTest is installed; ON requires
# it, OFF skips them), CMAKE_ARGS for extra configure arguments,
# PETRA_CCACHE=0 not to compile through ccache where the machine has one,
# PETRA_TORCH for the libtorch to build against:
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
targets=()
for arg in "$@"; do
  case "$arg" in
    --help|-h) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    -*) echo "build: unknown flag '$arg' (the arguments are target names)" >&2
        exit 2 ;;
    *) targets+=("$arg") ;;
  esac
done

if [[ "${PETRA_SKIP_INSTALL:-0}" != 1 ]]; then
  bash scripts/install-deps.sh --only "${PETRA_INSTALL_GROUPS:-build,test,data}"
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

# Ninja where the machine has it (install-deps.sh installs ninja-build): it
# starts a target's compiles before the libraries it links are done, which
# make does not. A folder configured already keeps its generator.
configure_args=()
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
  configure_args+=(-G Ninja)
fi
# ccache where the machine has one: a fresh clone's build then takes its
# objects from the cache, wherever the clone is (the base directory makes
# the paths relative). The precompiled header needs the sloppiness
# settings, as ccache's manual says.
if [[ "${PETRA_CCACHE:-1}" != 0 ]] && command -v ccache >/dev/null; then
  configure_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
else
  configure_args+=(-UCMAKE_CXX_COMPILER_LAUNCHER)
fi

start=$(date +%s)
echo "build: configuring ${BUILD_DIR} (${BUILD_TYPE})"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DPETRA_BUILD_TESTS="${PETRA_BUILD_TESTS:-AUTO}" \
  "${configure_args[@]}" ${torch_args[@]+"${torch_args[@]}"} ${CMAKE_ARGS:-}
if ((${#targets[@]})); then
  echo "build: compiling ${targets[*]} with ${JOBS} jobs"
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"
else
  echo "build: compiling with ${JOBS} jobs"
  cmake --build "$BUILD_DIR" -j "$JOBS"
fi
echo "build: binaries in ${BUILD_DIR}/bin ($(( $(date +%s) - start )) s)"
