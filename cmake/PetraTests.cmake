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
# BY_SUITE: one CTest test per test suite (`Suite`, running Suite.*) rather
# than per test, for binaries of many short tests: each test process loads
# libtorch (about 0.8 s), which made 600 tests of a few milliseconds cost
# 300 s of CI. Suites named in EACH_TEST (long ones, which would hold one
# core for minutes) stay one test per test. A suite where a test skipped
# and none failed is reported as skipped (tests/support/test_main.cc says
# so in its output), never as passed.
# A test binary's own code compiles at -O1 in optimized builds (the
# libraries it tests keep the build type's -O3): it drives and checks, the
# computing is in those libraries, and -O3 took twice as long to compile
# (the integration tests' first batch: 50 s, 25 s at -O1; the test binaries
# were half of CI's compile time; their run time did not change).
# PETRA_TEST_OPTIMIZE="" keeps -O3. petra_optimize_as_test(target) does the
# same for a test's helper programs.
set(PETRA_TEST_OPTIMIZE "-O1" CACHE STRING
  "Optimization of the test binaries' own code in optimized builds")
function(petra_optimize_as_test target)
  if(PETRA_TEST_OPTIMIZE)
    target_compile_options(${target} PRIVATE
      "$<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:${PETRA_TEST_OPTIMIZE}>")
  endif()
endfunction()
function(petra_discover_tests target)
  cmake_parse_arguments(ARG "BY_SUITE" "" "PROPERTIES;EACH_TEST" ${ARGN})
  petra_optimize_as_test(${target})
  if(ARG_BY_SUITE)
    set(one_by_one "")
    foreach(suite IN LISTS ARG_EACH_TEST)
      list(APPEND one_by_one "${suite}.*")
    endforeach()
    list(JOIN one_by_one ":" one_by_one)
    set(filter "-Gpu*:Long*")
    if(one_by_one)
      string(APPEND filter ":${one_by_one}")
      gtest_discover_tests(${target} TEST_FILTER "${one_by_one}"
        PROPERTIES ${ARG_PROPERTIES})
    endif()
    _petra_add_suites(${target} "${filter}" "${ARG_PROPERTIES}")
  else()
    gtest_discover_tests(${target} TEST_FILTER "-Gpu*:Long*"
      PROPERTIES ${ARG_PROPERTIES})
  endif()
  gtest_discover_tests(${target} TEST_FILTER "Gpu*"
    PROPERTIES ${ARG_PROPERTIES} LABELS gpu)
  gtest_discover_tests(${target} TEST_FILTER "Long*"
    PROPERTIES ${ARG_PROPERTIES} LABELS long)
endfunction()

# The suites' tests: after each build the binary lists its suites into a
# file (cmake/PetraListSuites.cmake), and CTest reads that file through a
# test include file, as gtest_discover_tests does with its own list.
set(_PETRA_LIST_SUITES ${CMAKE_CURRENT_LIST_DIR}/PetraListSuites.cmake)
function(_petra_add_suites target filter properties)
  set(list_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.txt)
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -D EXECUTABLE=$<TARGET_FILE:${target}>
      -D FILTER=${filter} -D OUTPUT=${list_file}
      -D WORKING_DIRECTORY=${CMAKE_CURRENT_BINARY_DIR}
      -P ${_PETRA_LIST_SUITES}
    BYPRODUCTS ${list_file} VERBATIM)
  set(props "")
  foreach(p IN LISTS properties)
    string(APPEND props " \"${p}\"")
  endforeach()
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake)
  file(GENERATE OUTPUT ${include_file} CONTENT "\
if(EXISTS \"${list_file}\")
  file(STRINGS \"${list_file}\" petra_suites)
  foreach(petra_suite IN LISTS petra_suites)
    add_test(\"\${petra_suite}\" \"$<TARGET_FILE:${target}>\"
      \"--gtest_filter=\${petra_suite}.*\")
    set_tests_properties(\"\${petra_suite}\" PROPERTIES
      WORKING_DIRECTORY \"${CMAKE_CURRENT_BINARY_DIR}\"
      SKIP_REGULAR_EXPRESSION
        \"petra-test: [0-9]+ of [0-9]+ tests skipped and none failed\"${props})
  endforeach()
else()
  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)
endif()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()

# Every test binary's main (tests/support/test_main.cc): gtest's, with a
# stack trace printed when a test crashes.
include(${CMAKE_CURRENT_LIST_DIR}/PetraCrashReport.cmake)
add_library(petra_test_main STATIC
  ${CMAKE_CURRENT_LIST_DIR}/../tests/support/test_main.cc)
target_link_libraries(petra_test_main PUBLIC GTest::gtest petra_crash_report)
