// The main of every GoogleTest binary: gtest's own, plus the crash report
// every main installs (services/base/crash_report.h), so that a crash names
// where it happened in the test's own output.
#include <gtest/gtest.h>

#include <iostream>

#include "services/base/crash_report.h"

namespace {

// A CTest test that runs a whole suite (petra_discover_tests BY_SUITE)
// must not pass when one of its tests skipped: this line, printed only when
// none failed, is what CTest's SKIP_REGULAR_EXPRESSION for such tests
// matches (cmake/PetraTests.cmake).
class SkipReport : public testing::EmptyTestEventListener {
  void OnTestProgramEnd(const testing::UnitTest& unit) override {
    if (unit.skipped_test_count() > 0 && unit.failed_test_count() == 0) {
      std::cout << "petra-test: " << unit.skipped_test_count() << " of "
                << unit.test_to_run_count() << " tests skipped and none failed"
                << std::endl;
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  petra::base::InstallCrashReport(argv[0]);
  testing::InitGoogleTest(&argc, argv);
  testing::UnitTest::GetInstance()->listeners().Append(new SkipReport);
  return RUN_ALL_TESTS();
}
