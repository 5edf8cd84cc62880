#!/usr/bin/env bash
# Which copy of libstdc++'s std::filesystem a program binds to when it loads
# a pip wheel's libtorch, which exports copies of its own (pytorch issue
# 133437; docs/GPU.md, 2026-11-27 and 2026-11-28). Compiles one small
# program twice, libstdc++ first and libtorch first among the libraries it
# needs, runs each (create_directories, then remove_all), and prints where
# the dynamic linker bound each filesystem symbol (LD_DEBUG=bindings); then
# the first libraries our own programs need.
#
# Usage: cxx_runtime_probe.sh [BUILD_DIR]   (default /tmp/petra-build-cuda)
# Environment: PYTHON (default python3), whose torch is probed; without one,
# Debian's libtorch in /usr/lib/x86_64-linux-gnu.
set -uo pipefail
build=${1:-/tmp/petra-build-cuda}
if [[ "$build" == --help || "$build" == -h ]]; then
  awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
  exit 0
fi
lib=$(${PYTHON:-python3} -c \
  'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' \
  2>/dev/null) || lib=/usr/lib/x86_64-linux-gnu
[[ -e "$lib/libtorch.so" ]] || lib=/usr/lib/x86_64-linux-gnu
echo "probe: libtorch in $lib"
for so in "$lib"/libtorch.so "$lib"/libtorch_cpu.so "$lib"/libc10.so; do
  [[ -e "$so" ]] || continue
  n=$(nm -D --defined-only "$so" 2>/dev/null | grep -c 'St10filesystem' || true)
  echo "probe: $(basename "$so") defines $n std::filesystem symbols"
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/probe.cc" <<'EOF'
#include <cstdio>
#include <filesystem>
int main(int, char** argv) {
  std::filesystem::path p = std::filesystem::path(argv[1]) / "a" / "b";
  std::filesystem::create_directories(p);
  std::error_code ec;
  const auto n = std::filesystem::remove_all(argv[1], ec);
  std::printf("removed %d entries (%s)\n", static_cast<int>(n),
              ec.message().c_str());
  return 0;
}
EOF
torch_lib=(-L"$lib" -Wl,-rpath,"$lib" -ltorch)
[[ -e "$lib/libtorch.so" ]] || torch_lib=("$lib"/libtorch.so.*)
c++ -std=c++17 -O1 "$work/probe.cc" -o "$work/stdcxx-first" \
  -Wl,--no-as-needed -lstdc++ "${torch_lib[@]}" || exit 1
c++ -std=c++17 -O1 "$work/probe.cc" -o "$work/torch-first" \
  -Wl,--no-as-needed "${torch_lib[@]}" -lstdc++ || exit 1
for order in stdcxx-first torch-first; do
  echo "probe: $order needs, in order:" \
    $(readelf -d "$work/$order" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  mkdir -p "$work/tree"
  LD_DEBUG=bindings LD_DEBUG_OUTPUT="$work/$order.bindings" \
    "$work/$order" "$work/tree"
  echo "probe: $order exit $?"
  cat "$work/$order.bindings".* 2>/dev/null |
    grep -E 'St10filesystem' | grep -E 'remove_all|recursive_directory' |
    sed -E 's/^ *[0-9]+: *//; s/binding file //' | sort -u | head -n 12
done
for program in petra-local bin/petra-local petra_client_test bin/petra_client_test; do
  [[ -f "$build/$program" ]] || continue
  echo "probe: $program needs first:" \
    $(readelf -d "$build/$program" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
      sed -n '1,4p')
done
exit 0
