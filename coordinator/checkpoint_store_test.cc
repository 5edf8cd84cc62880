#include "coordinator/checkpoint_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "services/base/durable_file.h"
#include "services/base/paths.h"
#include "services/engine/export_input.h"
#include "services/engine/state_file.h"

namespace petra::coordinator {
namespace {

using ::testing::HasSubstr;

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        std::filesystem::temp_directory_path() /
        absl::StrCat(
            "petra-resume-", ::getpid(), "-",
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    petra::base::RemoveTree(root_).IgnoreError();
  }
  void TearDown() override { petra::base::RemoveTree(root_).IgnoreError(); }

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
    ASSERT_TRUE(base::WriteFileAtomically(path, *bytes).ok());
    if (with_sha) {
      ASSERT_TRUE(base::WriteFileAtomically(path.string() + ".sha256",
                                            base::Sha256Hex(*bytes) + "\n")
                      .ok());
    }
  }
  std::filesystem::path root_;
};

TEST_F(CheckpointStoreTest, TakesTheNewestCompleteCheckpoint) {
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

TEST_F(CheckpointStoreTest, PassesOverDamagedIncompleteAndForeignOnes) {
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
  // no checksum; epoch 6: stage 0 is not a state file, and its checksum
  // says so.
  Write(3, 0);
  for (int j : {0, 1, 2}) Write(4, j);
  Write(5, 0, false);
  Write(5, 1, false);
  Write(6, 0);
  Write(6, 1);
  ASSERT_TRUE(base::WriteFileAtomically(Dir(6) / "stage-0.pt", "junk").ok());
  ASSERT_TRUE(base::WriteFileAtomically(Dir(6) / "stage-0.pt.sha256",
                                        base::Sha256Hex("junk"))
                  .ok());
  absl::StatusOr<ResumePoint> p = FindResumePoint(root_.string(), "job-1", 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->epoch, 1u);
  ASSERT_EQ(p->skipped.size(), 5u);
  EXPECT_THAT(p->skipped[0],
              HasSubstr("epoch-6: stage-0.pt is unreadable: state file: not a "
                        "torch.save archive"));
  p->skipped.erase(p->skipped.begin());
  EXPECT_THAT(p->skipped[0],
              HasSubstr("epoch-5: stage-0.pt.sha256 is missing"));
  EXPECT_THAT(p->skipped[1], HasSubstr("epoch-4: it has more than 2 stages"));
  EXPECT_THAT(p->skipped[2], HasSubstr("epoch-3: stage-1.pt is missing"));
  EXPECT_THAT(p->skipped[3],
              HasSubstr("epoch-2: stage-1.pt does not match its SHA-256"));
}

TEST_F(CheckpointStoreTest, NotFoundSaysWhy) {
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

TEST_F(CheckpointStoreTest, AJobIdMayNotLeadOutOfTheStateDir) {
  // A complete checkpoint outside the state dir, reachable through a link.
  Write(1, 0);
  Write(1, 1);
  const std::filesystem::path outside = root_.string() + "-outside";
  petra::base::RemoveTree(outside).IgnoreError();
  std::filesystem::rename(root_ / "jobs" / "job-1", outside);
  std::filesystem::create_directory_symlink(outside, root_ / "jobs" / "job-1");
  absl::StatusOr<ResumePoint> p = FindResumePoint(root_.string(), "job-1", 2);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      p.status().message(),
      HasSubstr("checkpoint.resume_from_job \"jobs/job-1/checkpoints\""));
  p = FindResumePoint(root_.string(), "../../etc", 2);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  petra::base::RemoveTree(outside).IgnoreError();
}

// What Commit leaves is what FindResumePoint takes, the export holds every
// stage's model tensors, and only the newest keep_last stay.
TEST_F(CheckpointStoreTest, WritesWhatAResumeFindsAndKeepsTheNewest) {
  auto stage = [](int epoch, int j) {
    return *engine::EncodeStateFile(
        {{absl::StrCat("blocks.", j, ".w"),
          torch::full({2}, static_cast<float>(epoch * 10 + j))},
         {"meta.epoch", torch::tensor(int64_t{epoch})}});
  };
  CheckpointStore store(JobLayout(root_, "job-1"));
  petra::v1::Preprocessing input;
  for (double v : {0.25, 0.5, 0.75}) input.add_mean(v);
  for (double v : {0.125, 0.25, 0.5}) input.add_std(v);
  for (uint32_t d : {3u, 32u, 32u}) input.add_input_shape(d);
  for (const char* n : {"cat", "dog", "caf\u00e9 au lait"}) {
    input.add_class_names(n);
  }
  // As FleetRunner::Checkpoint does: each stage's file arrives where the
  // store says, then the store makes them a checkpoint.
  auto arrive = [&](uint32_t e) {
    std::vector<std::string> sha256s;
    for (int j = 0; j < 2; ++j) {
      EXPECT_TRUE(
          base::WriteFileAtomically(store.Incoming(e, j), stage(e, j)).ok());
      sha256s.push_back(base::Sha256Hex(stage(e, j)));
    }
    return sha256s;
  };
  for (uint32_t e : {1u, 2u, 3u}) {
    // Until it is committed, what arrives is no checkpoint.
    const std::vector<std::string> sha256s = arrive(e);
    EXPECT_EQ(FindResumePoint(root_.string(), "job-1", 2)
                  .value_or(ResumePoint())
                  .epoch,
              e - 1);
    absl::StatusOr<std::string> rel = store.Commit(e, sha256s, 2, input);
    ASSERT_TRUE(rel.ok()) << rel.status();
    EXPECT_EQ(*rel, absl::StrCat("jobs/job-1/checkpoints/epoch-", e));
    EXPECT_FALSE(std::filesystem::exists(store.Incoming(e, 0).parent_path()));
  }
  EXPECT_FALSE(std::filesystem::exists(Dir(1)));
  EXPECT_TRUE(std::filesystem::exists(Dir(2)));
  absl::StatusOr<ResumePoint> p = FindResumePoint(root_.string(), "job-1", 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->epoch, 3u);
  EXPECT_EQ(p->files[1], Dir(3) / "stage-1.pt");
  EXPECT_TRUE(p->skipped.empty());
  // A pull that failed halfway is discarded; the same epoch written again
  // (a recovery that reached it anew) replaces the first.
  arrive(4);
  store.Discard(4);
  EXPECT_FALSE(std::filesystem::exists(store.Incoming(4, 0).parent_path()));
  ASSERT_TRUE(store.Commit(3, arrive(3), 2, input).ok());
  EXPECT_EQ(FindResumePoint(root_.string(), "job-1", 2)->epoch, 3u);

  std::ifstream in(root_ / "jobs" / "job-1" / "model.pt", std::ios::binary);
  absl::StatusOr<engine::NamedTensors> exported = engine::DecodeStateFile(
      std::string((std::istreambuf_iterator<char>(in)), {}));
  ASSERT_TRUE(exported.ok()) << exported.status();
  // The blocks, then the model's input, which reads back as written.
  ASSERT_EQ(exported->size(), 6u);
  EXPECT_EQ(exported->at("blocks.1.w")[0].item<float>(), 31.0f);
  absl::StatusOr<petra::v1::Preprocessing> back =
      engine::PreprocessingFromTensors(*exported);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->DebugString(), input.DebugString());
  // Without normalisation the tensors are the identity, 0 and 1.
  input.clear_mean();
  input.clear_std();
  std::map<std::string, torch::Tensor> identity;
  for (auto& [name, t] : engine::InputTensors(input)) identity[name] = t;
  EXPECT_TRUE(torch::equal(identity.at("input.mean"), torch::zeros({3})));
  EXPECT_TRUE(torch::equal(identity.at("input.std"), torch::ones({3})));
  // An export of an earlier version has none: NOT_FOUND, said so.
  EXPECT_EQ(engine::PreprocessingFromTensors({{"blocks.0.w", torch::ones(1)}})
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  identity.erase("input.std");
  EXPECT_THAT(
      std::string(
          engine::PreprocessingFromTensors(identity).status().message()),
      ::testing::HasSubstr("no tensor \"input.std\""));
}

TEST(JobLayout, SpellsOutEveryPath) {
  JobLayout l("/s", "job-7");
  EXPECT_EQ(l.record(), "/s/jobs/job-7/job.json");
  EXPECT_EQ(l.train_log(), "/s/jobs/job-7/train_log.csv");
  EXPECT_EQ(l.export_file(), "/s/jobs/job-7/model.pt");
  EXPECT_EQ(l.stage_file(3, 1), "/s/jobs/job-7/checkpoints/epoch-3/stage-1.pt");
  EXPECT_EQ(JobLayout::Checksum(l.stage_file(3, 1)),
            "/s/jobs/job-7/checkpoints/epoch-3/stage-1.pt.sha256");
  EXPECT_EQ(l.RelativeCheckpoint(3), "jobs/job-7/checkpoints/epoch-3");
  EXPECT_EQ(JobLayout::CheckpointEpoch("epoch-12"), 12u);
  EXPECT_EQ(JobLayout::CheckpointEpoch("epoch-x"), std::nullopt);
  EXPECT_EQ(JobLayout::CheckpointEpoch("stage-1"), std::nullopt);
}

}  // namespace
}  // namespace petra::coordinator
