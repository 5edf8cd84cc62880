#!/usr/bin/env bash
# The repository stands alone: no tracked file names a folder of the machine
# it was written on (a home, the work tree's parent) or a document kept
# beside the repository (../shared). A command printed into docs/ with an
# absolute build path was the way such paths crept in (scripts/bench.sh now
# prints paths inside the repository as relative ones).
# Usage: check_standalone.sh [SOURCE_DIR]. Prints each offending line and
# exits 1; exits 0 when there is none, or when SOURCE_DIR is not a git
# checkout (then there is no list of tracked files to read).
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check_standalone: $root is not a git checkout; nothing to check"
  exit 0
fi
# This script names the patterns it looks for; nothing else may.
hits=$(git ls-files -z -- . ':!tests/cmake/check_standalone.sh' |
  xargs -0 grep -nIE '(^|[^A-Za-z0-9_.$}-])(/work/|/home/[a-z]|\.\./shared/)' \
    2>/dev/null || true)
if [[ -n "$hits" ]]; then
  echo "check_standalone: absolute machine paths or ../shared in the repository:"
  sed 's/^/  /' <<<"$hits"
  exit 1
fi
echo "check_standalone: no machine path in $(git ls-files | wc -l) tracked files"
