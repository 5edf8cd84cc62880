#include "coordinator/job_resume.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace petra::coordinator {
namespace {

using ::testing::HasSubstr;

petra::v1::JobSpec Spec() {
  petra::v1::JobSpec s;
  s.mutable_model()->set_width(0.5);
  s.mutable_training()->set_epochs(3);
  s.set_seed(7);
  return s;
}

TEST(CheckResumable, AllowsWhatDoesNotShapeTheWeights) {
  petra::v1::JobSpec later = Spec();
  later.set_name("more");
  later.mutable_training()->set_epochs(9);
  later.mutable_training()->set_max_steps(100);
  later.mutable_checkpoint()->set_every_epochs(1);
  later.mutable_checkpoint()->set_resume_from_job("job-1");
  later.mutable_evaluation()->set_every_epochs(2);
  later.add_devices("cuda:1");
  EXPECT_TRUE(CheckResumable(Spec(), later).ok());
}

TEST(CheckResumable, RefusesAnotherNetworkOrSeedNamingTheFields) {
  petra::v1::JobSpec later = Spec();
  later.mutable_model()->set_width(0.25);
  later.set_seed(8);
  absl::Status s = CheckResumable(Spec(), later);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("model.width"));
  EXPECT_THAT(s.message(), HasSubstr("seed"));
}

}  // namespace
}  // namespace petra::coordinator
