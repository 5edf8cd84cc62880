#!/usr/bin/env bash
# A randomized fault campaign against a fleet of separate processes on this
# machine (tests/chaos/chaos.py says what each run does and what it must
# hold to):
#
#   bash scripts/chaos.sh --runs 50 --seed 7       # the campaign of record
#   bash scripts/chaos.sh --runs 3 --seed 2024     # what CI runs (a test)
#
# Builds first (PETRA_SKIP_BUILD=1 reuses build/), then passes every flag to
# chaos.py: --runs, --seed, --bound SECONDS (a run that takes longer is a
# hang), --fault-window SECONDS, --replicas 2 (a replicated job), --jobs 2
# (two jobs at once on disjoint servers, faults in both), --stranger (a
# stranger sends micro-batches without the jobs' data keys to every stage
# server throughout; each must be refused), --json FILE, --keep (keep each
# run's logs and state).
#
#   bash scripts/chaos.sh --runs 20 --jobs 2 --stranger   # hostile + faults
#
# Run as root to put the state directories on small tmpfs mounts (the
# full-disk faults need them; without, they are skipped and said so).
# Exits 1 when any run hung, left a checkpoint that verifies but is wrong,
# or ended otherwise than the rules allow.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == --help || "${1:-}" == -h ]]; then
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
if [[ "${PETRA_SKIP_BUILD:-0}" != 1 ]]; then bash scripts/build.sh >&2; fi
exec /usr/bin/python3 tests/chaos/chaos.py \
  --bin-dir "${BUILD_DIR:-build}/bin" "$@"
