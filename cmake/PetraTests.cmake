# Registers a GoogleTest binary's tests with CTest. Test suites whose name
# starts with "Gpu" (or instantiations named "Gpu/...") need a CUDA device:
# they get the label `gpu`, and a run without one reports them as skipped
# (GTEST_SKIP), never as passed. `ctest -L gpu` runs only them.
function(petra_discover_tests target)
  cmake_parse_arguments(ARG "" "" "PROPERTIES" ${ARGN})
  gtest_discover_tests(${target} TEST_FILTER "-Gpu*"
    PROPERTIES ${ARG_PROPERTIES})
  gtest_discover_tests(${target} TEST_FILTER "Gpu*"
    PROPERTIES ${ARG_PROPERTIES} LABELS gpu
      SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()
