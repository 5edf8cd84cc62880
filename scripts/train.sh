#!/usr/bin/env bash
# The README's main-job command: installs what is missing (the build and
# data packages only), builds the `petra` program alone, and runs
# `petra train` on the embedded default (RevNet18 on Fashion-MNIST from
# Debian's dataset-fashion-mnist), keeping the trained model in
# build/model.pt and the report in build/train-report.json. Extra arguments
# go to `petra train`.
set -euo pipefail
cd "$(dirname "$0")/.."

PETRA_INSTALL_GROUPS=${PETRA_INSTALL_GROUPS:-build,data} \
  bash scripts/build.sh petra
BUILD_DIR=${BUILD_DIR:-build}
exec "$BUILD_DIR/bin/petra" train --report "$BUILD_DIR/train-report.json" \
  --output "$BUILD_DIR/model.pt" "$@"
