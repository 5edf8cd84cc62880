#!/usr/bin/env bash
# Run on a GPU host, in the repository (the device tool runs it there with
# `carry: [".gpu"]`): unpacks the Debian packages of scripts/gpu/fetch-deps.sh
# into a prefix, builds the CUDA flavour into build-cuda/ against the Python
# torch's libtorch (scripts/build.sh with PETRA_TORCH=python), prints what it
# runs on, and runs the `gpu` tests. With --all, then the whole suite; with
# --bench, then the GPU benchmarks (scripts/bench.sh gpu: docs/GPU.md).
# Output also goes to $OUT/gpu-build.log when OUT is set (the device tool).
# Environment: PETRA_DEPS_PREFIX (default /opt/petra-deps), JOBS (default:
# every core).
set -euo pipefail
cd "$(dirname "$0")/../.."

all=0
bench=0
for arg in "$@"; do
  case "$arg" in
    --all) all=1 ;;
    --bench) bench=1 ;;
    --help|-h) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build: unknown argument '$arg' (--all, --bench, --help)" >&2
       exit 2 ;;
  esac
done
if [[ -n "${OUT:-}" && -z "${PETRA_GPU_LOGGING:-}" ]]; then
  export PETRA_GPU_LOGGING=1
  set -o pipefail
  bash "$0" "$@" 2>&1 | tee "$OUT/gpu-build.log"
  exit "${PIPESTATUS[0]}"
fi

PREFIX=${PETRA_DEPS_PREFIX:-/opt/petra-deps}
ls .gpu/debs/*.deb >/dev/null 2>&1 || {
  echo "gpu-build: no .gpu/debs here: run scripts/gpu/fetch-deps.sh on the Debian machine and carry .gpu" >&2
  exit 2
}
echo "gpu-build: unpacking $(ls .gpu/debs/*.deb | wc -l) packages into $PREFIX"
mkdir -p "$PREFIX"
for f in .gpu/debs/*.deb; do dpkg-deb -x "$f" "$PREFIX"; done
export PATH="$PREFIX/usr/bin:$PATH"
export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "gpu-build: host"
ldd --version | head -1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
nvcc --version | tail -1 || true
c++ --version | head -1
cmake --version | head -1

BUILD_DIR=build-cuda PETRA_TORCH=python PETRA_SKIP_INSTALL=1 \
  JOBS="${JOBS:-$(nproc)}" \
  CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$PREFIX/usr ${CMAKE_ARGS:-}" \
  bash scripts/build.sh

echo "gpu-build: the gpu tests"
ctest --test-dir build-cuda -L gpu --output-on-failure --timeout 600 \
  | tee build-cuda/ctest-gpu.log
skipped=$(grep -c '(Skipped)$' build-cuda/ctest-gpu.log || true)
echo "gpu-build: ${skipped} gpu test(s) skipped"
if [[ "$skipped" != 0 ]]; then
  echo "gpu-build: a gpu test skipped on a GPU host: that is a failure here" >&2
  exit 1
fi
if [[ $all == 1 ]]; then
  echo "gpu-build: the whole suite"
  ctest --test-dir build-cuda --output-on-failure -j 8 --timeout 600
fi
if [[ $bench == 1 ]]; then
  # Issue 17's GPU section of docs/BENCHMARKS.md (and issue 18's PaReprop
  # figure), by scripts/bench.sh gpu. Under the device tool the updated
  # document comes back as $OUT/BENCHMARKS.md; the tree there has no .git,
  # so BENCH_COMMIT names the commit.
  doc=docs/BENCHMARKS.md
  if [[ -n "${OUT:-}" ]]; then
    cp docs/BENCHMARKS.md "$OUT/BENCHMARKS.md"
    doc=$OUT/BENCHMARKS.md
  fi
  echo "gpu-build: the GPU benchmarks into $doc"
  BUILD_DIR=build-cuda PETRA_SKIP_BUILD=1 PETRA_PYTHON=python3 \
    BENCH_DOC="$doc" bash scripts/bench.sh gpu
fi
