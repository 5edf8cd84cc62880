#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs
# every test (unit and integration) with CTest, then the fuzz targets for a
# short while (scripts/fuzz.sh). Exits non-zero when any test or fuzz run
# fails. At its end it prints the wall time of each phase and the ten
# slowest tests: CI's budget is 30 minutes on a fresh clone with the
# packages installed, 40 with the install (docs/TESTS.md, "Test time").
#
#   bash scripts/test.sh           # what CI runs (.ci/run)
#   bash scripts/test.sh --long    # the long campaigns instead: the tests
#                                  # labelled `long` (accuracy claims), the
#                                  # chaos campaign of record, the
#                                  # sanitizer soak and the compose fleet
#                                  # from the image's own full build; hours
#   bash scripts/test.sh --busy 2  # the suite with 2 processes spinning on
#                                  # the cores beside it: a loaded machine
#
# Environment: JOBS (default 2, CTest's and the compiler's), BUILD_DIR
# (default build), FUZZ_SECONDS (default 30, 0 skips the fuzz targets),
# PETRA_SKIP_INSTALL=1 (no package step), CUDA_CHECK=0 (no CUDA compile
# check, scripts/cuda-compile-check.sh), CTEST_ARGS (more ctest arguments,
# e.g. "-R LocalFleet").
set -euo pipefail
cd "$(dirname "$0")/.."

long=0
busy=0
while (($#)); do
  case "$1" in
    --long) long=1 ;;
    --busy)
      [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] ||
        { echo "test: --busy takes a number of processes" >&2; exit 2; }
      busy=$2; shift ;;
    --help|-h) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "test: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

BUILD_DIR=${BUILD_DIR:-build}
start=$(date +%s)
phases=()
phase_start=$start
# Records how long the phase that just ended took.
end_phase() {
  local now
  now=$(date +%s)
  phases+=("$(printf '%-8s %5d s' "$1" $((now - phase_start)))")
  phase_start=$now
}
failed=()

if [[ "${PETRA_SKIP_INSTALL:-0}" != 1 ]]; then
  bash scripts/install-deps.sh
  bash scripts/install-test-tools.sh
fi
end_phase install

# cuda_ipc's CUDA layer against Debian's CUDA headers and libcudart (about
# 40 s on a fresh machine, mostly a 774 MB download): beside the build,
# which the download does not slow; its output comes after the build's.
cuda_pid=
if [[ "${CUDA_CHECK:-1}" != 0 ]] && ((long == 0)); then
  cuda_log=$(mktemp -t petra-cuda-check-XXXXXX.log)
  bash scripts/cuda-compile-check.sh > "$cuda_log" 2>&1 &
  cuda_pid=$!
fi

PETRA_SKIP_INSTALL=1 PETRA_BUILD_TESTS=ON bash scripts/build.sh
end_phase build

if [[ -n "$cuda_pid" ]]; then
  cuda_rc=0
  wait "$cuda_pid" || cuda_rc=$?
  cat "$cuda_log"
  rm -f "$cuda_log"
  ((cuda_rc == 0)) || failed+=("cuda compile check (exit $cuda_rc)")
  end_phase cuda  # what it took past the build's end
fi

# --busy N: N spinning processes for as long as the tests run.
hogs=()
stop_hogs() {
  if ((${#hogs[@]})); then
    kill "${hogs[@]}" 2>/dev/null || true
    wait "${hogs[@]}" 2>/dev/null || true
  fi
  hogs=()
}
docker_pid=
# Also the docker test when the run ends early: its own process group
# (setsid), all of it; compose-live.sh removes what it started on SIGTERM.
trap 'stop_hogs; [[ -z $docker_pid ]] || kill -TERM -- "-$docker_pid" 2>/dev/null || true' EXIT
for ((i = 0; i < busy; i++)); do
  bash -c 'while :; do :; done' &
  hogs+=($!)
done
((busy == 0)) || echo "test: ${busy} busy process(es) beside the suite"

log=$BUILD_DIR/ctest.log
docker_log=$BUILD_DIR/ctest-docker.log
if ((long)); then
  label_args=(-L long)
else
  label_args=(-LE 'long|docker')
  # The `docker` test (deploy.ComposeLive) runs beside the suite, not in
  # one of its JOBS slots: most of its 5 to 10 minutes it waits on its
  # containers, and a slot of its own left a core idle that long (CI's
  # run took 5 minutes more). Its output comes after the suite's.
  echo "test: the docker test beside the suite (ctest -L docker, log $docker_log)"
  # shellcheck disable=SC2086
  setsid ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 300 \
    --no-tests=ignore -L docker ${CTEST_ARGS:-} > "$docker_log" 2>&1 &
  docker_pid=$!
fi
echo "test: running the suite (ctest ${label_args[*]})"
set +e
# shellcheck disable=SC2086
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-2}" \
  --timeout 300 --no-tests=error "${label_args[@]}" ${CTEST_ARGS:-} | tee "$log"
rc=${PIPESTATUS[0]}
set -e
((rc == 0)) || failed+=("ctest (exit $rc)")
if [[ -n $docker_pid ]]; then
  docker_rc=0
  wait "$docker_pid" || docker_rc=$?
  echo "test: the docker test's run (ctest -L docker):"
  cat "$docker_log"
  ((docker_rc == 0)) || failed+=("ctest -L docker (exit $docker_rc)")
  cat "$docker_log" >> "$log"
  docker_pid=
fi
# A skip is not a pass: say how many tests did not run (the `gpu` label
# needs a CUDA device; scripts/gpu/build.sh runs them on one).
echo "test: $(grep -c '(Skipped)$' "$log" || true) test(s) skipped"
stop_hogs
end_phase tests

if ((long)); then
  PETRA_SKIP_BUILD=1 bash scripts/chaos.sh --runs 50 --seed 7 ||
    failed+=("chaos campaign (exit $?)")
  end_phase chaos
  bash scripts/soak.sh || failed+=("soak (exit $?)")
  end_phase soak
  # The image users build (it compiles the project inside, about as long
  # as the build phase: too long for CI, whose deploy.ComposeLive takes
  # this build's binaries), with the full wait for the hour-long alert.
  bash scripts/compose-live.sh --full --bin-dir "$BUILD_DIR/bin" ||
    failed+=("compose-live --full (exit $?)")
  end_phase compose
elif [[ "${FUZZ_SECONDS:-30}" != 0 ]]; then
  # The fuzz targets (clang, its own build dir), briefly: FUZZ_SECONDS
  # each, both at once.
  bash scripts/fuzz.sh --seconds "${FUZZ_SECONDS:-30}" ||
    failed+=("fuzz (exit $?)")
  end_phase fuzz
fi

echo
echo "test: wall time by phase"
printf '  %s\n' "${phases[@]}"
printf '  %-8s %5d s\n' total $(($(date +%s) - start))
echo "test: the ten slowest tests"
# awk reads to the end (head would close the pipe early, and with pipefail
# sort's SIGPIPE failed the whole run: exit 141 after every test passed).
sed -nE 's/^.*Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/p' "$log" |
  sort -rn | awk 'NR <= 10 {printf "  %7.1f s  %s\n", $1, $2}'
if ((${#failed[@]})); then
  echo "test: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "test: all passed"
