// ProgressPrinter: what a watcher of a job sees while it starts.
#include "client/job_progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

petra::v1::JobEvent StateEvent(petra::v1::JobState state,
                               const std::string& activity) {
  petra::v1::JobEvent e;
  e.set_kind(petra::v1::JobEvent::KIND_STATE);
  e.mutable_job()->set_id("job-7");
  e.mutable_job()->set_state(state);
  e.mutable_job()->set_activity(activity);
  return e;
}

// A starting job's long steps (a tokenizer trained, text encoded) are
// printed once each, as they begin.
TEST(ProgressPrinter, PrintsEachActivityOfAStartingJobOnce) {
  ProgressPrinter printer(/*quiet=*/false);
  testing::internal::CaptureStdout();
  printer.OnEvent(StateEvent(petra::v1::JOB_STATE_STARTING, ""));
  printer.OnEvent(StateEvent(petra::v1::JOB_STATE_STARTING, "training it"));
  printer.OnEvent(StateEvent(petra::v1::JOB_STATE_STARTING, "training it"));
  printer.OnEvent(StateEvent(petra::v1::JOB_STATE_STARTING, "encoding"));
  printer.OnEvent(StateEvent(petra::v1::JOB_STATE_RUNNING, ""));
  EXPECT_EQ(testing::internal::GetCapturedStdout(),
            "job-7: starting\njob-7: training it\njob-7: encoding\n"
            "job-7: running\n");
  ProgressPrinter quiet(/*quiet=*/true);
  testing::internal::CaptureStdout();
  quiet.OnEvent(StateEvent(petra::v1::JOB_STATE_STARTING, "training it"));
  EXPECT_THAT(testing::internal::GetCapturedStdout(),
              Not(HasSubstr("training it")));
}

}  // namespace
}  // namespace petra::client
