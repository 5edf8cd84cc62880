#include "coordinator/job_resume.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "services/cli/durable_file.h"
#include "services/engine/state_file.h"

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

class FindResumePointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        std::filesystem::temp_directory_path() /
        absl::StrCat(
            "petra-resume-", ::getpid(), "-",
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::filesystem::path Dir(int epoch) {
    return root_ / "jobs" / "job-1" / "checkpoints" /
           absl::StrCat("epoch-", epoch);
  }
  // A stage file holding one tensor, with its checksum beside it.
  void Write(int epoch, int stage, bool with_sha = true) {
    absl::StatusOr<std::string> bytes = engine::EncodeStateFile(
        {{"w", torch::full({2}, static_cast<float>(epoch * 10 + stage))}});
    ASSERT_TRUE(bytes.ok());
    const auto path = Dir(epoch) / absl::StrCat("stage-", stage, ".pt");
    ASSERT_TRUE(cli::WriteFileAtomically(path, *bytes).ok());
    if (with_sha) {
      ASSERT_TRUE(cli::WriteFileAtomically(path.string() + ".sha256",
                                           cli::Sha256Hex(*bytes) + "\n")
                      .ok());
    }
  }
  std::filesystem::path root_;
};

TEST_F(FindResumePointTest, TakesTheNewestCompleteCheckpoint) {
  for (int e : {1, 2, 10}) {
    Write(e, 0);
    Write(e, 1);
  }
  absl::StatusOr<ResumePoint> p = FindResumePoint(root_.string(), "job-1", 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->epoch, 10u);  // numerically newest, not "epoch-2"
  ASSERT_EQ(p->files.size(), 2u);
  EXPECT_TRUE(p->skipped.empty());
}

TEST_F(FindResumePointTest, PassesOverDamagedIncompleteAndForeignOnes) {
  Write(1, 0);
  Write(1, 1);
  // epoch 2: stage 1 damaged after its checksum was written.
  Write(2, 0);
  Write(2, 1);
  {
    std::fstream f(Dir(2) / "stage-1.pt",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  // epoch 3: stage 1 missing; epoch 4: written by a 3-stage job; epoch 5:
  // no checksum.
  Write(3, 0);
  for (int j : {0, 1, 2}) Write(4, j);
  Write(5, 0, false);
  Write(5, 1, false);
  absl::StatusOr<ResumePoint> p = FindResumePoint(root_.string(), "job-1", 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->epoch, 1u);
  ASSERT_EQ(p->skipped.size(), 4u);
  EXPECT_THAT(p->skipped[0],
              HasSubstr("epoch-5: stage-0.pt.sha256 is missing"));
  EXPECT_THAT(p->skipped[1], HasSubstr("epoch-4: it has more than 2 stages"));
  EXPECT_THAT(p->skipped[2], HasSubstr("epoch-3: stage-1.pt is missing"));
  EXPECT_THAT(p->skipped[3],
              HasSubstr("epoch-2: stage-1.pt does not match its SHA-256"));
}

TEST_F(FindResumePointTest, NotFoundSaysWhy) {
  absl::StatusOr<ResumePoint> p = FindResumePoint(root_.string(), "job-1", 2);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), HasSubstr("(none written)"));
  Write(1, 0);
  p = FindResumePoint(root_.string(), "job-1", 2);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(
      p.status().message(),
      HasSubstr("no usable checkpoint (epoch-1: stage-1.pt is missing)"));
}

TEST_F(FindResumePointTest, AJobIdMayNotLeadOutOfTheStateDir) {
  // A complete checkpoint outside the state dir, reachable through a link.
  Write(1, 0);
  Write(1, 1);
  const std::filesystem::path outside = root_.string() + "-outside";
  std::filesystem::remove_all(outside);
  std::filesystem::rename(root_ / "jobs" / "job-1", outside);
  std::filesystem::create_directory_symlink(outside, root_ / "jobs" / "job-1");
  absl::StatusOr<ResumePoint> p = FindResumePoint(root_.string(), "job-1", 2);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      p.status().message(),
      HasSubstr("checkpoint.resume_from_job \"jobs/job-1/checkpoints\""));
  p = FindResumePoint(root_.string(), "../../etc", 2);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(outside);
}

}  // namespace
}  // namespace petra::coordinator
