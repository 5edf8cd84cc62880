#!/usr/bin/env bash
# CI smoke test of one benchmark section: runs `scripts/bench.sh --smoke
# SECTION` against an existing build into a scratch document and checks that
# the section's table is there. Usage: smoke_test.sh BUILD_DIR SECTION REGEX
set -euo pipefail
build_dir=$1 section=$2 pattern=$3
doc=$(mktemp -t petra-bench-smoke-XXXXXX.md)
trap 'rm -f "$doc"' EXIT
cd "$(dirname "$0")/.."
BUILD_DIR=$build_dir PETRA_SKIP_BUILD=1 BENCH_DOC=$doc \
  bash scripts/bench.sh --smoke "$section"
cat "$doc"
if ! grep -Eq -- "$pattern" "$doc"; then
  echo "smoke_test: section $section has no line matching /$pattern/" >&2
  exit 1
fi
echo "smoke_test: section $section ok"
