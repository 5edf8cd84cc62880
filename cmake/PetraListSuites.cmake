# Run at build time by petra_discover_tests(... BY_SUITE) (cmake -P): lists
# the test suites of EXECUTABLE that FILTER selects, one name per line, into
# OUTPUT. A binary that cannot list its tests fails the build, as
# gtest_discover_tests does.
execute_process(
  COMMAND "${EXECUTABLE}" --gtest_list_tests "--gtest_filter=${FILTER}"
  WORKING_DIRECTORY "${WORKING_DIRECTORY}"
  OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE rc
  TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR
    "${EXECUTABLE} --gtest_list_tests failed (${rc}):\n${listing}${errors}")
endif()
# gtest lists "Suite." (or "Prefix/Suite.  # TypeParam = ...") flush left
# and each test of it indented below.
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suites "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    string(APPEND suites "${CMAKE_MATCH_1}\n")
  endif()
endforeach()
file(WRITE "${OUTPUT}.tmp" "${suites}")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
