#!/usr/bin/env bash
# Each program given lists libstdc++ before any libtorch among the
# libraries it needs (DT_NEEDED, in the order the dynamic linker searches
# them): cmake/PetraTorch.cmake says why.
# Usage: check_needed_order.sh PROGRAM...
set -euo pipefail
(($#)) || { echo "usage: $0 PROGRAM..." >&2; exit 2; }
failed=0
for program in "$@"; do
  needed=$(readelf -d "$program" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  first=$(grep -m1 -E '^(libstdc\+\+|libtorch|libc10)' <<<"$needed" || true)
  case "$first" in
    libstdc++*) echo "ok: $(basename "$program") loads $first first" ;;
    *) echo "FAIL: $(basename "$program") needs, in order:" $needed >&2
       failed=1 ;;
  esac
done
exit "$failed"
