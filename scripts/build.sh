#!/usr/bin/env bash
# Installs the Debian packages (scripts/install-deps.sh), configures and
# builds PETRA fleet into build/ (binaries in build/bin/).
# Environment: BUILD_DIR (default build), BUILD_TYPE (default Release),
# JOBS (default 2: one torch translation unit needs ~1.5 GB),
# PETRA_SKIP_INSTALL=1 to skip the package step, CMAKE_ARGS for extra
# configure arguments (e.g. -DPETRA_WITH_CUDA=ON -DTorch_DIR=...).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}
JOBS=${JOBS:-2}

if [[ "${PETRA_SKIP_INSTALL:-0}" != 1 ]]; then
  bash scripts/install-deps.sh
fi

echo "build: configuring ${BUILD_DIR} (${BUILD_TYPE})"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" ${CMAKE_ARGS:-}
echo "build: compiling with ${JOBS} jobs"
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "build: binaries in ${BUILD_DIR}/bin"
