#!/usr/bin/env bash
# CI (with this machine's CMake) and by hand (with another, e.g. CMake 4.x):
# builds tests/cmake/registration with the CMake given and checks what
# cmake/PetraTests.cmake promises: the test lists load, the `gpu` label
# holds exactly the Gpu test and the `long` label the Long one, and CTest
# reports a skipped test as skipped, never as passed; a BY_SUITE binary gets
# one test per suite (EACH_TEST suites one per test), and a suite with a
# skipped test is skipped, or failed when one failed, never passed. CMake
# 4.4 once failed to read every test list here.
# Usage: check_registration.sh [CMAKE] (default: cmake on the PATH)
set -euo pipefail
cmake_bin=${1:-cmake}
ctest_bin=$(dirname "$(command -v "$cmake_bin")")/ctest
here=$(cd "$(dirname "$0")" && pwd)
build=$(mktemp -d -t petra-registration-XXXXXX)
trap 'rm -rf "$build"' EXIT
fail() { echo "check_registration: $*" >&2; exit 1; }

echo "check_registration: $("$cmake_bin" --version | sed -n 1p)"
"$cmake_bin" -S "$here/registration" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; fail "configure failed"; }
"$cmake_bin" --build "$build" -j 2 > "$build/build.log" 2>&1 ||
  { cat "$build/build.log"; fail "build failed"; }
gpu=$("$ctest_bin" --test-dir "$build" -L gpu 2>&1) || true
echo "$gpu"
[[ "$gpu" == *"Error"* ]] && fail "ctest could not read the test lists"
grep -Eq 'GpuRegistration\.SkipsWithoutADevice .*Skipped' <<< "$gpu" ||
  fail "the Gpu test is not reported as skipped under -L gpu"
[[ $(grep -c 'Test #' <<< "$gpu") == 1 ]] ||
  fail "-L gpu should select exactly the one Gpu test"
long=$("$ctest_bin" --test-dir "$build" -L long 2>&1) ||
  { echo "$long"; fail "the Long test failed"; }
[[ $(grep -c 'Test #' <<< "$long") == 1 ]] &&
  grep -Eq 'LongRegistration\.IsLabelledLong .*Passed' <<< "$long" ||
  fail "-L long should select exactly the one Long test"
other=$("$ctest_bin" --test-dir "$build" -LE 'gpu|long' -R '^Registration' 2>&1) ||
  { echo "$other"; fail "the test outside the labels failed"; }
grep -Eq 'Registration\.RunsAnywhere .*Passed' <<< "$other" ||
  fail "the test outside the labels did not run"
[[ $(grep -c 'Test #' <<< "$other") == 1 ]] ||
  fail "-LE 'gpu|long' should select exactly the one unlabelled test"
suites=$("$ctest_bin" --test-dir "$build" -LE 'gpu|long' -E '^Registration' 2>&1) ||
  true
echo "$suites"
for want in 'Together .*Passed' 'PartlySkipped .*Skipped' \
    'FailsBesideASkip .*Skipped' 'OneByOne\.First .*Passed' \
    'OneByOne\.Second .*Passed'; do
  grep -Eq "Test +#[0-9]+: ${want}" <<< "$suites" ||
    fail "BY_SUITE: no test line matching /${want}/"
done
[[ $(grep -c 'Test #' <<< "$suites") == 5 ]] ||
  fail "BY_SUITE should register 3 suites and 2 tests of OneByOne"
failing=$(PETRA_PROBE_FAIL=1 "$ctest_bin" --test-dir "$build" \
  -R '^FailsBesideASkip$' 2>&1) && fail "a failing suite passed"
grep -Eq 'FailsBesideASkip .*Failed' <<< "$failing" ||
  { echo "$failing"; fail "a suite with a failure beside a skip is not failed"; }
echo "check_registration: ok"
