// The main of every GoogleTest binary: gtest's own, plus the crash report
// every main installs (services/base/crash_report.h), so that a crash names
// where it happened in the test's own output.
#include <gtest/gtest.h>

#include "services/base/crash_report.h"

int main(int argc, char** argv) {
  petra::base::InstallCrashReport(argv[0]);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
