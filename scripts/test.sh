#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# test (unit and integration) with CTest. Exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

bash scripts/build.sh
if [[ "${PETRA_SKIP_INSTALL:-0}" != 1 ]]; then
  bash scripts/install-test-tools.sh
fi

BUILD_DIR=${BUILD_DIR:-build}
echo "test: running the suite"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-2}" --timeout 300
echo "test: install + build + tests took $(( $(date +%s) - start )) s"
