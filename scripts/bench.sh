#!/usr/bin/env bash
# Runs the benchmarks and rewrites their sections of docs/BENCHMARKS.md with
# the results, the machine, the date, the commit and the command that
# produced each table.
#
#   bash scripts/bench.sh                  # every section (about 6 hours;
#                                          # accuracy, long_run 2 hours each)
#   bash scripts/bench.sh memory accuracy  # only these; the others are kept
#   bash scripts/bench.sh --smoke          # seconds-long versions (CI), into
#                                          # a scratch file, not the docs
#   BENCH_OLD_BIN=/old/build/bin bash scripts/bench.sh compare
#                                          # this build's throughput beside
#                                          # another's, alternating runs
#   BENCH_OLD_BIN=/old/build/bin bash scripts/bench.sh main_job
#                                          # the main job by both builds
# Sections: throughput fleets hosts memory capped zoo accuracy long_run
# forward_gradient feed peer transformer transformer_recipe staleness
# threads partition probe transport precision replicas replicas_accuracy
# replicas_plan language_model concurrent micro_batch_cost fidelity_at_speed
# race exact_schedules (the default), compare, main_job and gpu (only when named; gpu needs a CUDA
# build and a GPU, and scripts/gpu/build.sh --bench runs it on a GPU host;
# gpu --smoke runs its commands on the CPU at toy sizes).
# Environment: BENCH_DEVICE (precision: the device, default cpu; cuda on a
# GPU host), BUILD_DIR (default build), PETRA_SKIP_BUILD=1 reuses a build,
# BENCH_DOC (default docs/BENCHMARKS.md), BENCH_OLD_BIN (compare, main_job: the other
# build's bin directory; BENCH_OLD_COMMIT names its commit in the doc;
# BENCH_ROUNDS: their alternating rounds per build, default 3 and 2),
# BENCH_COMMIT (the commit to name where the tree has no .git), PETRA_PYTHON
# (default /usr/bin/python3), BENCH_DEADLINE (a Unix time: each command gets
# only the time left, none starts after it; scripts/gpu/build.sh sets it).
# BENCH_GPU_TRAIN (the gpu section's training rows, e.g.
# "PETRA:2:fleet:fp32:cuda_ipc"), PETRA_GPU_CTEST_LOG (the gpu tests' CTest
# log, for the gpu section's summary; scripts/gpu/build.sh sets it).
# A command that fails is marked in its section, the others still run, and
# the script then exits 1 naming what failed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BIN=$BUILD_DIR/bin
# A GPU host's Python may live elsewhere (scripts/gpu/build.sh sets it).
PY=${PETRA_PYTHON:-/usr/bin/python3}
ALL=(throughput fleets hosts memory capped zoo accuracy long_run
     forward_gradient feed peer transformer transformer_recipe staleness
     threads partition probe transport precision replicas replicas_accuracy
     replicas_plan language_model concurrent micro_batch_cost
     fidelity_at_speed race exact_schedules)

smoke=0
sections=()
for arg in "$@"; do
  case "$arg" in
    --smoke) smoke=1 ;;
    --help|-h) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
      exit 0 ;;
    *)
      # The sections: ALL's, and those that run only when named.
      if [[ " ${ALL[*]} compare main_job gpu " == *" $arg "* ]]; then
        sections+=("$arg")
        continue
      fi
      echo "bench.sh: unknown section or flag '$arg' (sections: ${ALL[*]}," \
        "and when named: compare main_job gpu)" >&2
      exit 2 ;;
  esac
done
((${#sections[@]})) || sections=("${ALL[@]}")
if ((smoke)); then
  DOC=${BENCH_DOC:-$(mktemp -t petra-bench-smoke-XXXXXX.md)}
else
  DOC=${BENCH_DOC:-docs/BENCHMARKS.md}
fi
if [[ "${PETRA_SKIP_BUILD:-0}" != 1 ]]; then bash scripts/build.sh; fi
RESULTS=$(mktemp -d -t petra-bench-XXXXXX)
trap 'rm -rf "$RESULTS"' EXIT

machine() {
  echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') at commit" \
    "${BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)} on" \
    "$(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | sed -n 1p))," \
    "$(free -g | awk '/Mem:/{print $2}') GiB."
}

# Prints "Command: `...`" (shell-quoted), runs the command (its stderr is
# progress) and prints its standard output, through grep -E "$RUN_FILTER"
# when that is set. A command that fails loses only itself: the section
# says so with the end of its stderr and goes on, and the script exits 1
# at the end naming it. With BENCH_DEADLINE (a Unix time) a command gets
# only the time left, and none starts once it has passed. After each
# command the section so far goes into the document, so a run stopped
# midway keeps what it measured.
run() {
  # Quoted as a shell would need it, so that the line can be pasted.
  local line rc=0 limit=()
  line=$($PY -c 'import shlex, sys; print(shlex.join(sys.argv[1:]))' "$@")
  # Paths inside the repository as relative ones: the document names no
  # machine's folders (a BUILD_DIR given absolute printed one).
  line=${line//"$PWD/"/}
  echo "Command: \`$line\`"
  echo
  echo "bench: $line" >&2
  if [[ -n "${BENCH_DEADLINE:-}" ]]; then
    local left=$((BENCH_DEADLINE - $(date +%s)))
    if ((left < 5)); then
      echo "Not run: the time budget (BENCH_DEADLINE) was spent before it."
      echo "$SECTION: not run (time budget): $line" >> "$RESULTS/failed.txt"
      flush_section
      return 0
    fi
    limit=(timeout --kill-after=10 "$left")
  fi
  set +e
  "${limit[@]}" "$@" 2>&1 >"$RESULTS/out.txt" | tee "$RESULTS/err.txt" >&2
  rc=${PIPESTATUS[0]}
  set -e
  if [[ -n "${RUN_FILTER:-}" ]]; then
    grep -E "$RUN_FILTER" "$RESULTS/out.txt" || true
  else
    cat "$RESULTS/out.txt"
  fi
  if ((rc != 0)); then
    local why="exit $rc"
    if ((rc == 124 || rc == 137)) && ((${#limit[@]})); then
      why="stopped at the time budget"
    fi
    echo
    echo "**Failed** ($why); the end of its error output:"
    echo
    echo '```'
    tail -n 5 "$RESULTS/err.txt"
    echo '```'
    echo "$SECTION: failed ($why): $line" >> "$RESULTS/failed.txt"
  fi
  flush_section
}

# Writes the section's text so far into the document.
flush_section() {
  $PY bench/update_doc.py "$DOC" "$SECTION" < "$RESULTS/$SECTION.md"
}

# A RevViT small enough for seconds-long smoke runs.
SMOKE_REVVIT="--arch revvit --patch-size 7 --embed-dim 16 --depth 2 --heads 2"

# The sections (each section_NAME prints its Markdown).
for f in scripts/bench/training_sections.sh scripts/bench/precision_sections.sh \
         scripts/bench/build_sections.sh; do
  # shellcheck source=/dev/null
  source "$f"
done

# Each section runs in a subshell with errexit, so that a step outside
# run() that fails stops its own section only; what it wrote is kept.
touch "$RESULTS/failed.txt"
for SECTION in "${sections[@]}"; do
  echo "bench: section $SECTION" >&2
  : > "$RESULTS/$SECTION.md"
  set +e
  (set -e; "section_$SECTION" >> "$RESULTS/$SECTION.md")
  rc=$?
  set -e
  if ((rc != 0)); then
    printf '\n**The section stopped here** (exit %d).\n' "$rc" \
      >> "$RESULTS/$SECTION.md"
    echo "$SECTION: the section stopped (exit $rc)" >> "$RESULTS/failed.txt"
  fi
  flush_section
done
echo "bench: wrote ${sections[*]} into $DOC"
if [[ -s "$RESULTS/failed.txt" ]]; then
  echo "bench: what failed or did not run:" >&2
  sed 's/^/  /' "$RESULTS/failed.txt" >&2
  exit 1
fi
