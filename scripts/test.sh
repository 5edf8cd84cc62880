#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# test (unit and integration) with CTest, then the fuzz targets for a short
# while (scripts/fuzz.sh). Exits non-zero when any test or fuzz run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

bash scripts/build.sh
if [[ "${PETRA_SKIP_INSTALL:-0}" != 1 ]]; then
  bash scripts/install-test-tools.sh
fi

BUILD_DIR=${BUILD_DIR:-build}
echo "test: running the suite"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${JOBS:-2}" --timeout 300 \
  | tee "$BUILD_DIR/ctest.log"
# A skip is not a pass: say how many tests did not run (the `gpu` label
# needs a CUDA device; scripts/gpu/build.sh runs them on one).
echo "test: $(grep -c '(Skipped)$' "$BUILD_DIR/ctest.log" || true) test(s) skipped"
# The fuzz targets (clang, its own build dir), briefly: FUZZ_SECONDS each,
# both at once; 0 skips them.
if [[ "${FUZZ_SECONDS:-45}" != 0 ]]; then
  bash scripts/fuzz.sh --seconds "${FUZZ_SECONDS:-45}"
fi
echo "test: install + build + tests took $(( $(date +%s) - start )) s"
