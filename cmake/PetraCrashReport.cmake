# petra_crash_report: the crash handler every main and test binary installs
# (services/base/crash_report.h). Its own file, as tests/cmake/registration
# builds cmake/PetraTests.cmake's test main without the rest of the tree.
include_guard(GLOBAL)
add_library(petra_crash_report STATIC
  ${CMAKE_CURRENT_LIST_DIR}/../services/base/crash_report.cc)
target_include_directories(petra_crash_report
  PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(petra_crash_report PUBLIC absl::symbolize)
