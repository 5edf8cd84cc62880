#!/usr/bin/env bash
# The README's main-job command. Installs what is missing, builds, and runs
# the embedded default job. `petra train` does not exist yet (it arrives with
# the fleet), so for now this builds and shows what the client offers.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}

"$BUILD_DIR/bin/petra" --help
"$BUILD_DIR/bin/petra" version
