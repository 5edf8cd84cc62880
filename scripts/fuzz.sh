#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang-14 into build-fuzz
# (coverage, ASan and UBSan on everything built there) and runs each for
# --seconds N (default 60) from the seeds in tests/fuzz/corpus/, both at
# once (one core each). Exits non-zero when any input crashes, throws,
# leaks, trips a sanitizer, breaks an invariant or exceeds the memory
# limits. A crashing input is kept in build-fuzz/fuzz-artifacts/; replay it
# with build-fuzz/bin/petra_fuzz_<target> <file>.
# --services adds the service request fuzzer (tests/fuzz/service_requests_
# fuzz.cc: every RPC's requests, mutated, through a stage server and a
# coordinator in process). It builds the whole stage server and coordinator
# under the sanitizers (the engine and the models too), so CI runs only its
# plain build briefly (the ctest fuzz.ServiceRequestsBriefly).
# Environment: FUZZ_BUILD_DIR (default build-fuzz), JOBS (default 2).
# Needs clang-14 and libclang-rt-14-dev (scripts/install-deps.sh, test group).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,15s/^# \{0,1\}//p' "$0"
  echo "Usage: scripts/fuzz.sh [--seconds N] [--services]"
}

seconds=60
services=OFF
while (($#)); do
  case "$1" in
    --services) services=ON ;;
    --seconds)
      [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] ||
        { echo "fuzz.sh: --seconds needs a positive whole number" >&2; exit 2; }
      seconds=$2; shift ;;
    --help|-h) usage; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-2}
if ! command -v clang++-14 >/dev/null ||
   ! compgen -G "/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null; then
  echo "fuzz.sh: needs clang-14 and libclang-rt-14-dev" \
       "(bash scripts/install-deps.sh --only test)" >&2
  exit 1
fi

start=$(date +%s)
echo "fuzz: configuring ${BUILD_DIR} (clang-14, ASan, UBSan, libFuzzer)"
# No tests and no precompiled header: only the fuzz targets and the few
# libraries they link are built.
mkdir -p "$BUILD_DIR"
# Ninja where the machine has it: make built the libraries one after the
# other (110 s on 2 cores, 1.3 cores busy).
generator=()
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
cmake -S . -B "$BUILD_DIR" ${generator[@]+"${generator[@]}"} \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
  -DCMAKE_CXX_COMPILER=clang++-14 -DPETRA_FUZZ=ON -DPETRA_BUILD_TESTS=OFF \
  -DPETRA_USE_PCH=OFF -DPETRA_FUZZ_SERVICES="$services" \
  >"$BUILD_DIR/configure.log" 2>&1 ||
  { cat "$BUILD_DIR/configure.log" >&2; exit 1; }
# name : largest input in bytes (a few messages; a job spec of a few KB)
targets=(tensor_codec:8192 job_spec:4096)
# The service fuzzer's input steers mutations; 1 KiB is plenty of choices.
[[ "$services" == ON ]] && targets+=(services:1024)
echo "fuzz: building with ${JOBS} jobs"
# shellcheck disable=SC2046
cmake --build "$BUILD_DIR" -j "$JOBS" \
  --target $(for t in "${targets[@]}"; do printf 'petra_fuzz_%s ' "${t%%:*}"; done) \
  >"$BUILD_DIR/build.log" 2>&1 ||
  { tail -n 80 "$BUILD_DIR/build.log" >&2; exit 1; }
built=$(date +%s)

rm -rf "$BUILD_DIR/fuzz-artifacts"
mkdir -p "$BUILD_DIR/fuzz-artifacts"
# ASan's default 256 MB quarantine of freed blocks makes a long run's RSS
# creep towards the limit with no leak at all (flat with no quarantine).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=64"
pids=()
for t in "${targets[@]}"; do
  name=${t%%:*} max_len=${t##*:}
  mkdir -p "$BUILD_DIR/fuzz-corpus/$name"
  echo "fuzz: petra_fuzz_${name} for ${seconds} s"
  # The first directory collects new inputs; the committed seeds stay as
  # they are. Limits: one input may not take 30 s, a single allocation may
  # not exceed 512 MB (no header alone may allocate), the process 2 GB.
  # The service fuzzer's servers build models (a stage of a job the spec
  # allows): more room, and its state directories are its own to clear.
  rss=2048 malloc=512 timeout=30
  [[ "$name" == services ]] && rss=6144 malloc=4096 timeout=120
  "$BUILD_DIR/bin/petra_fuzz_${name}" -max_total_time="$seconds" \
    -max_len="$max_len" -rss_limit_mb="$rss" -malloc_limit_mb="$malloc" -timeout="$timeout" \
    -print_final_stats=1 -artifact_prefix="$BUILD_DIR/fuzz-artifacts/${name}-" \
    "$BUILD_DIR/fuzz-corpus/$name" "tests/fuzz/corpus/$name" \
    >"$BUILD_DIR/fuzz-${name}.log" 2>&1 &
  pids+=($!)
done

failed=0
i=0
for t in "${targets[@]}"; do
  name=${t%%:*}
  if wait "${pids[$i]}"; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$BUILD_DIR/fuzz-${name}.log")
    echo "fuzz: petra_fuzz_${name}: ${runs:-?} inputs, no crash"
  else
    failed=1
    echo "fuzz: petra_fuzz_${name} FAILED; its log:" >&2
    tail -n 60 "$BUILD_DIR/fuzz-${name}.log" >&2
    ls -1 "$BUILD_DIR"/fuzz-artifacts/"${name}"-* 2>/dev/null | sed 's/^/fuzz: crashing input: /' >&2 || true
  fi
  i=$((i + 1))
done
rm -rf /tmp/petra-service-fuzz-* 2>/dev/null || true
echo "fuzz: build $((built - start)) s, runs ${seconds} s, total $(( $(date +%s) - start )) s"
exit "$failed"
