# Sourced by scripts/bench.sh: the sections that set this build beside another (BENCH_OLD_BIN).
# Each section_NAME prints its Markdown; run() and machine() are bench.sh's.
# shellcheck shell=bash

section_compare() {
  local old=${BENCH_OLD_BIN:-} args=(--rounds "${BENCH_ROUNDS:-3}" -- --width 0.25
    --micro-batches 200 --stages 2)
  if ((smoke)); then
    old=$BIN
    # One data channel: the throughput smoke runs both.
    args=(--rounds 1 -- --width 0.125 --micro-batches 4 --micro-batch 16
          --stages 2 --transports shm)
  fi
  if [[ -z "$old" ]]; then
    echo "bench.sh: compare needs BENCH_OLD_BIN, the other build's bin" \
      "directory" >&2
    return 2
  fi
  echo "## Two builds side by side (throughput)"
  echo
  machine
  echo
  echo "The build of this commit (new) against ${BENCH_OLD_COMMIT:-$old} (old),"
  echo "in alternating runs of the same benchmark, so that both see the same"
  echo "machine noise:"
  echo
  run $PY bench/compare_builds.py --old-bin "$old" --new-bin "$BIN" "${args[@]}"
}

section_main_job() {
  local old=${BENCH_OLD_BIN:-} args=(--rounds "${BENCH_ROUNDS:-2}")
  if ((smoke)); then
    old=$BIN
    args=(--rounds 1 -- --width 0.125 --epochs 1 --train-limit 256
          --test-limit 64)
  fi
  if [[ -z "$old" ]]; then
    echo "bench.sh: main_job needs BENCH_OLD_BIN, the other build's bin" \
      "directory" >&2
    return 2
  fi
  echo "## The main job, two builds side by side"
  echo
  machine
  echo
  echo "\`petra train\` with no flags (what scripts/train.sh runs) by the build"
  echo "of this commit (new) and by ${BENCH_OLD_COMMIT:-$old} (old), alternating:"
  echo
  run $PY bench/main_job.py --old-bin "$old" --new-bin "$BIN" "${args[@]}"
}
