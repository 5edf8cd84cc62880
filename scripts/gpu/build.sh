#!/usr/bin/env bash
# Run on a GPU host, in the repository (the device tool runs it there with
# `carry: [".gpu"]`): unpacks the Debian packages of scripts/gpu/fetch-deps.sh
# into a prefix, builds the CUDA flavour against the Python torch's libtorch
# (scripts/build.sh with PETRA_TORCH=python) in a folder outside the tree,
# prints what it runs on, runs the `gpu` tests, then the replica tests
# (torch's c10d Gloo as the wheel builds it). With --bench, then the
# GPU benchmarks (scripts/bench.sh gpu), and two jobs at once against each
# alone on four of its cores (bench.sh concurrent: issue 51's figure, which
# a 2-core machine cannot give), into docs/BENCHMARKS.md ($OUT's copy under
# the device tool); with --all, then the whole suite.
#
# Under the device tool every result lands in $OUT as it is made: the log
# (gpu-build.log), the gpu tests' CTest log (ctest-gpu.log), the data
# channels' conformance suite's (ctest-channels.log), the state files'
# (ctest-state-files.log), the replica tests' (ctest-replicas.log) and,
# after each benchmark, BENCHMARKS.md. A failed test or benchmark does not stop what
# follows it; the script exits 1 at the end if anything failed.
#
# The tree is copied afresh for each command while /tmp lives as long as the
# host does: the build stays in $PETRA_GPU_BUILD_DIR, and unchanged sources
# get back the times the last build saw (scripts/gpu/source_stamps.py), so a
# second command rebuilds only what changed.
#
# Flags: --bench, --all, --deadline SECONDS (default 450: no benchmark
# starts, and the running one is stopped, that many seconds after this
# script started, so that one command ends inside the device tool's limit).
# Environment: PETRA_DEPS_PREFIX (default /opt/petra-deps),
# PETRA_GPU_BUILD_DIR (default /tmp/petra-build-cuda), JOBS (default: every
# core).
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)

all=0
bench=0
deadline=450
args=("$@")
while (($#)); do
  case "$1" in
    --all) all=1 ;;
    --bench) bench=1 ;;
    --deadline)
      [[ "${2:-}" =~ ^[0-9]+$ ]] || {
        echo "gpu-build: --deadline takes a number of seconds" >&2; exit 2; }
      deadline=$2; shift ;;
    --help|-h) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
      exit 0 ;;
    *) echo "gpu-build: unknown argument '$1' (--all, --bench," \
         "--deadline SECONDS, --help)" >&2
       exit 2 ;;
  esac
  shift
done
if [[ -n "${OUT:-}" && -z "${PETRA_GPU_LOGGING:-}" ]]; then
  export PETRA_GPU_LOGGING=1
  bash "$0" ${args[@]+"${args[@]}"} 2>&1 | tee "$OUT/gpu-build.log"
  exit "${PIPESTATUS[0]}"
fi

PREFIX=${PETRA_DEPS_PREFIX:-/opt/petra-deps}
BUILD=${PETRA_GPU_BUILD_DIR:-/tmp/petra-build-cuda}
failed=()

# First line of a command's output. Not `| head -1`: under pipefail the
# command may die of SIGPIPE once head has gone (exit 141, a race).
first_line() {
  local text
  text=$("$@" 2>&1) || true
  echo "${text%%$'\n'*}"
}

shopt -s nullglob
debs=(.gpu/debs/*.deb)
shopt -u nullglob
if ((${#debs[@]} == 0)); then
  echo "gpu-build: no .gpu/debs here: run scripts/gpu/fetch-deps.sh on the" \
    "Debian machine and carry .gpu" >&2
  exit 2
fi
# Unpacked once per host: the list of packages is the stamp.
deb_list=$(ls -l .gpu/debs | awk '{print $5, $9}')
if [[ "$(cat "$PREFIX/.petra-debs" 2>/dev/null)" == "$deb_list" ]]; then
  echo "gpu-build: the ${#debs[@]} packages are unpacked in $PREFIX already"
else
  echo "gpu-build: unpacking ${#debs[@]} packages into $PREFIX"
  mkdir -p "$PREFIX"
  for f in "${debs[@]}"; do dpkg-deb -x "$f" "$PREFIX"; done
  echo "$deb_list" > "$PREFIX/.petra-debs"
fi
export PATH="$PREFIX/usr/bin:$PATH"
export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "gpu-build: host"
first_line ldd --version
first_line nvidia-smi --query-gpu=name,driver_version,memory.total \
  --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
nvcc --version 2>/dev/null | tail -n 1 || true
first_line c++ --version
first_line cmake --version

# A build folder configured for a tree at another path cannot be reused.
if [[ -f "$BUILD/CMakeCache.txt" ]] &&
   ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$PWD" "$BUILD/CMakeCache.txt"; then
  echo "gpu-build: $BUILD was configured for another source folder:" \
    "building afresh"
  rm -rf "$BUILD"
fi
mkdir -p "$BUILD"
python3 scripts/gpu/source_stamps.py restore "$BUILD/petra-source-stamps.json"
set +e
BUILD_DIR=$BUILD PETRA_TORCH=python PETRA_SKIP_INSTALL=1 \
  JOBS="${JOBS:-$(nproc)}" \
  CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$PREFIX/usr ${CMAKE_ARGS:-}" \
  bash scripts/build.sh
rc=$?
set -e
# Saved after a failed build too: the objects it did make match these.
python3 scripts/gpu/source_stamps.py save "$BUILD/petra-source-stamps.json"
if ((rc != 0)); then
  echo "gpu-build: the build failed (exit $rc)" >&2
  exit "$rc"
fi
echo "gpu-build: built in $(($(date +%s) - start)) s"

echo "gpu-build: the gpu tests"
set +e
ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 300 \
  | tee "$BUILD/ctest-gpu.log"
rc=${PIPESTATUS[0]}
set -e
if [[ -n "${OUT:-}" ]]; then cp "$BUILD/ctest-gpu.log" "$OUT/ctest-gpu.log"; fi
skipped=$(grep -c '(Skipped)$' "$BUILD/ctest-gpu.log" || true)
echo "gpu-build: ${skipped} gpu test(s) skipped"
if ((rc != 0)); then failed+=("gpu tests (ctest exit $rc)"); fi
if [[ "$skipped" != 0 ]]; then
  # On a GPU host a skip means the build or the device is not what it
  # should be.
  failed+=("${skipped} gpu test(s) skipped on a GPU host")
fi
# Runs the tests whose names match $3 into $BUILD/$1 (copied to $OUT as
# soon as they end); a failure is noted as $2.
run_tests() {
  local log=$1 what=$2 regex=$3 rc
  set +e
  ctest --test-dir "$BUILD" --output-on-failure --timeout 300 -R "$regex" \
    | tee "$BUILD/$log"
  rc=${PIPESTATUS[0]}
  set -e
  if [[ -n "${OUT:-}" ]]; then cp "$BUILD/$log" "$OUT/$log"; fi
  if ((rc != 0)); then failed+=("$what (ctest exit $rc)"); fi
}
# The data channels' conformance suite (cuda_ipc's protocol included) and
# cuda_ipc's faults, on the GPU host's build.
run_tests ctest-channels.log "data-channel conformance" \
  'DataChannel|DeviceSlots|SharedMemoryChannel|SharedRing|TransportChoice'
# The one build check that a wheel's libtorch can fail: libstdc++ first
# among the libraries each program needs (cmake/PetraTorch.cmake). Where
# it fails, the link command says why.
set +e
ctest --test-dir "$BUILD" -R '^cmake\.ProgramsLoadTheCxxRuntimeBeforeLibtorch$' \
  --output-on-failure
rc=$?
set -e
if ((rc != 0)); then
  failed+=("libstdc++ is not the first library the programs need")
  echo "gpu-build: how bin/petra-local was linked:"
  (cd "$BUILD" && ninja -t commands petra-local 2>/dev/null | tail -n 1) || true
fi
# State files: torch's Pickler, Unpickler and zip reader and writer as the
# wheel's torch builds them (services/engine/state_file_reader.cc drives
# them itself), and a checkpoint restored from disk.
run_tests ctest-state-files.log "state files" \
  '^(StateFile|CheckpointStoreTest|StageStreams\.RestoreCheckpoint.*)$'
# Replicas: c10d's Gloo as the wheel's torch builds it (its headers, its
# API), in one process and across a fleet's processes.
run_tests ctest-replicas.log "replicas" \
  'ReplicaGroup|InProcessReplicas|ReplicaRendezvous|ReplicatedPetra'
if grep -q "^PETRA_GLOO_INCLUDE_DIR:PATH=.*NOTFOUND" "$BUILD/CMakeCache.txt"; then
  failed+=("no Gloo headers beside the wheel's libtorch: replicas refused")
fi
if ((bench)); then
  # The GPU section of docs/BENCHMARKS.md. Under the device tool the
  # document comes back as $OUT/BENCHMARKS.md, rewritten after each
  # benchmark; the tree there has no .git, so BENCH_COMMIT names the commit
  # when the caller sets it.
  doc=docs/BENCHMARKS.md
  if [[ -n "${OUT:-}" ]]; then
    cp docs/BENCHMARKS.md "$OUT/BENCHMARKS.md"
    doc=$OUT/BENCHMARKS.md
  fi
  echo "gpu-build: the GPU benchmarks into $doc" \
    "(until $((deadline - ($(date +%s) - start))) s from now)"
  set +e
  BUILD_DIR=$BUILD PETRA_SKIP_BUILD=1 PETRA_PYTHON=python3 \
    BENCH_DOC="$doc" BENCH_DEADLINE=$((start + deadline)) \
    PETRA_GPU_CTEST_LOG="$BUILD/ctest-gpu.log" bash scripts/bench.sh gpu \
    concurrent
  rc=$?
  set -e
  if ((rc != 0)); then failed+=("benchmarks (bench.sh exit $rc)"); fi
fi
if ((all)); then
  echo "gpu-build: the whole suite"
  set +e
  ctest --test-dir "$BUILD" --output-on-failure -j 8 --timeout 600
  rc=$?
  set -e
  if ((rc != 0)); then failed+=("whole suite (ctest exit $rc)"); fi
fi
echo "gpu-build: done in $(($(date +%s) - start)) s"
if ((${#failed[@]})); then
  printf 'gpu-build: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
