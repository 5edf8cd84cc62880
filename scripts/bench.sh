#!/usr/bin/env bash
# Runs the benchmarks and rewrites docs/BENCHMARKS.md with their results, the
# machine, the date and the command that produced each table.
# BENCH_WIDTH (default 1) and BENCH_MICRO_BATCH (default 64) size the memory
# benchmark; PETRA_SKIP_BUILD=1 reuses an existing build.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [[ "${PETRA_SKIP_BUILD:-0}" != 1 ]]; then bash scripts/build.sh; fi

width=${BENCH_WIDTH:-1}
micro_batch=${BENCH_MICRO_BATCH:-64}
memory_cmd="$BUILD_DIR/bin/petra_bench_memory --arch revnet18 --variant cifar --width $width --micro-batch $micro_batch"
echo "bench: $memory_cmd"
memory=$($memory_cmd)

out=docs/BENCHMARKS.md
mkdir -p docs
{
  echo "# Benchmarks"
  echo
  echo "Written by \`bash scripts/bench.sh\`; every table below comes from the command"
  echo "printed above it. Do not edit by hand."
  echo
  echo "* Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "* Machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "* Commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo
  echo "## Memory of the buffer configurations (paper, Table 3)"
  echo
  echo "Command: \`$memory_cmd\`"
  echo
  echo "$memory"
  echo
  echo "Peak bytes count parameters (with BatchNorm statistics), optimizer state"
  echo "(momentum and accumulated gradients), input buffers and weight stashes;"
  echo "the first stage's buffered data batch is included (the paper leaves it out)."
} > "$out"
echo "bench: wrote $out"
