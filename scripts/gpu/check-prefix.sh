#!/usr/bin/env bash
# Run on the Debian machine, as root, after scripts/gpu/fetch-deps.sh:
# configures and builds as a GPU host would, against the packages of
# .gpu/debs unpacked into a prefix, with /usr's own copies of what a build
# finds (the headers, CMake and pkg-config files, unversioned and static
# libraries and tools of their -dev and tool packages) hidden. The hiding
# is an overlay on /usr inside a private mount namespace: nothing outside
# this script sees it. The libtorch stays Debian's (a GPU host has pip's),
# so this checks that the project's CMake finds every other package in a
# prefix, as scripts/gpu/build.sh needs, without spending GPU time on it.
#
# Usage: check-prefix.sh [TARGET...]   (default: petra_wire_test, which
# links gRPC and RE2, and petra_engine_test, which links protobuf and torch)
# Environment: JOBS (default 2), PETRA_CHECK_DIR (default
# /tmp/petra-prefix-check: the prefix, the overlay and the build).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [[ "${1:-}" == --help || "${1:-}" == -h ]]; then
  awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
  exit 0
fi
targets=("$@")
((${#targets[@]})) || targets=(petra_wire_test petra_engine_test)
[[ $(id -u) == 0 ]] || { echo "check-prefix: needs root (a mount namespace)" >&2; exit 2; }
shopt -s nullglob
debs=(.gpu/debs/*.deb)
shopt -u nullglob
((${#debs[@]})) || { echo "check-prefix: no .gpu/debs: run scripts/gpu/fetch-deps.sh first" >&2; exit 2; }

work=${PETRA_CHECK_DIR:-/tmp/petra-prefix-check}
prefix=$work/prefix
mkdir -p "$prefix" "$work/build"
rm -rf "$work/upper" "$work/overlay-work"
mkdir -p "$work/upper" "$work/overlay-work"
echo "check-prefix: unpacking ${#debs[@]} packages into $prefix"
for f in "${debs[@]}"; do dpkg-deb -x "$f" "$prefix"; done

# What a build could find in /usr instead of the prefix: the files of the
# -dev and tool packages among them (their runtime libraries stay: the
# host's programs load them, and no build looks them up by name).
hidden=$work/hidden.txt
: > "$hidden"
for f in "${debs[@]}"; do
  pkg=$(dpkg-deb -f "$f" Package)
  case "$pkg" in
    *-dev|googletest|protobuf-compiler*)
      dpkg -L "$pkg" 2>/dev/null | while read -r p; do
        if [[ "$p" == /usr/* && ( -f "$p" || -L "$p" ) ]]; then echo "$p"; fi
      done >> "$hidden" || true ;;
  esac
done
echo "check-prefix: hiding $(wc -l < "$hidden") files of /usr"

# shellcheck disable=SC2016
unshare -m bash -c '
  set -euo pipefail
  work=$1 prefix=$2 hidden=$3 jobs=$4; shift 4
  mount -t overlay overlay \
    -o "lowerdir=/usr,upperdir=$work/upper,workdir=$work/overlay-work" /usr
  xargs -d "\n" rm -f < "$hidden"
  export PATH="$prefix/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu"
  echo "check-prefix: configuring $work/build"
  cmake -S . -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix/usr"
  echo "check-prefix: building $*"
  cmake --build "$work/build" -j "$jobs" --target "$@"
' check-prefix "$work" "$prefix" "$hidden" "${JOBS:-2}" "${targets[@]}"
echo "check-prefix: built ${targets[*]} against $prefix"
