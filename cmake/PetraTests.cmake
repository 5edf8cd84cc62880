# Registers a GoogleTest binary's tests with CTest. Test suites whose name
# starts with "Gpu" (or instantiations named "Gpu/...") need a CUDA device:
# they get the label `gpu`, and `ctest -L gpu` runs only them. Without a
# device they call GTEST_SKIP, and CTest reports them as skipped, never as
# passed: gtest_discover_tests gives every test SKIP_REGULAR_EXPRESSION
# "\[  SKIPPED \]" itself since CMake 3.18. Setting it again here broke
# CMake 4.x, which writes the properties as [[bracket arguments]] that a
# value ending in "]" closes early (a syntax error in every *_tests.cmake,
# seen with CMake 4.4.3); tests/cmake_test.sh checks the registration.
# Suites whose name starts with "Long" are the long campaigns (an accuracy
# claim, minutes each): the label `long`, which scripts/test.sh leaves out
# and `scripts/test.sh --long` runs.
function(petra_discover_tests target)
  cmake_parse_arguments(ARG "" "" "PROPERTIES" ${ARGN})
  gtest_discover_tests(${target} TEST_FILTER "-Gpu*:Long*"
    PROPERTIES ${ARG_PROPERTIES})
  gtest_discover_tests(${target} TEST_FILTER "Gpu*"
    PROPERTIES ${ARG_PROPERTIES} LABELS gpu)
  gtest_discover_tests(${target} TEST_FILTER "Long*"
    PROPERTIES ${ARG_PROPERTIES} LABELS long)
endfunction()

# Every test binary's main (tests/support/test_main.cc): gtest's, with a
# stack trace printed when a test crashes.
include(${CMAKE_CURRENT_LIST_DIR}/PetraCrashReport.cmake)
add_library(petra_test_main STATIC
  ${CMAKE_CURRENT_LIST_DIR}/../tests/support/test_main.cc)
target_link_libraries(petra_test_main PUBLIC GTest::gtest petra_crash_report)
