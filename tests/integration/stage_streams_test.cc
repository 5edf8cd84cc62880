// Raw StageService streams and control calls against one stage server
// started the way a user starts it: per-message errors, shared-memory slots
// read, checked and freed, checkpoint pieces refused or restored, and bad
// control requests, with the server going on after each.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "petra/v1/coordinator.grpc.pb.h"
#include "petra/v1/stage.grpc.pb.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/probes.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/test_messages.h"

namespace petra::testing {
namespace {

// Raw streams against one stage server holding a one-stage job.
class StageStreams : public FleetProcesses {
 protected:
  void SetUp() override {
    StartStages(1);
    stub_ = petra::v1::StageService::NewStub(grpc::CreateChannel(
        stage_addresses_[0], grpc::InsecureChannelCredentials()));
  }

  static petra::v1::JobSpec JobSevenSpec() {
    return JobSevenOnOneStage().spec();
  }

  void AssignJobSeven() {
    const petra::v1::AssignRequest assign = JobSevenOnOneStage();
    grpc::ClientContext c1;
    petra::v1::AssignResponse assigned;
    grpc::Status s = stub_->Assign(&c1, assign, &assigned);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_GT(assigned.parameter_count(), 0u);
  }

  void AssignAndStartEval(int micro_batches) {
    AssignJobSeven();
    petra::v1::StartRequest start;
    start.set_job_id("job-7");
    start.set_phase(petra::v1::PHASE_EVAL);
    start.set_epoch(1);
    start.set_micro_batches(micro_batches);
    grpc::ClientContext c2;
    petra::v1::StartResponse started;
    grpc::Status s = stub_->Start(&c2, start, &started);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  // A well-formed micro-batch of 4 images with labels, for job-7.
  static petra::v1::ForwardMessage Good(uint64_t id) {
    return ImagesWithLabels(id, petra::v1::PHASE_EVAL);
  }

  std::unique_ptr<petra::v1::StageService::Stub> stub_;
};

TEST_F(StageStreams, MalformedMessagesGetPerMessageErrorsAndTheServerGoesOn) {
  {  // No job assigned yet: no data key is valid, the stream ends at once.
    grpc::ClientContext early;
    auto stream = stub_->Forward(Keyed(&early));
    petra::v1::StreamReply reply;
    EXPECT_FALSE(stream->Read(&reply)) << reply.DebugString();
    grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(s.error_message(), HasSubstr("holds no job"));
  }
  AssignAndStartEval(3);
  grpc::ClientContext context;
  auto stream = stub_->Forward(Keyed(&context));
  petra::v1::StreamReply r;

  petra::v1::ForwardMessage bad = Good(0);
  bad.mutable_activation()->mutable_first()->set_data("short");
  r = Exchange(*stream, bad);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().status().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.error().micro_batch_id(), 0u);

  r = Exchange(*stream, Good(99));
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().status().code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(r.error().status().message(), HasSubstr("out of range"));

  petra::v1::ForwardMessage stranger = Good(0);
  stranger.set_sender_stage(5);
  r = Exchange(*stream, stranger);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().status().code(), grpc::StatusCode::PERMISSION_DENIED);

  petra::v1::ForwardMessage other_job = Good(0);
  other_job.set_job_id("job-8");
  r = Exchange(*stream, other_job);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().status().code(), grpc::StatusCode::NOT_FOUND);

  // The stream and the server still work: micro-batch 0 is evaluated ...
  r = Exchange(*stream, Good(0));
  ASSERT_TRUE(r.has_done()) << r.DebugString();
  EXPECT_EQ(r.done().micro_batch_id(), 0u);
  EXPECT_EQ(r.done().samples(), 4u);
  // ... sending it again is a duplicate ...
  r = Exchange(*stream, Good(0));
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().status().code(), grpc::StatusCode::ALREADY_EXISTS);
  // ... and the rest of the pass completes.
  r = Exchange(*stream, Good(1));
  EXPECT_TRUE(r.has_done());
  r = Exchange(*stream, Good(2));
  EXPECT_TRUE(r.has_done());
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());

  grpc::ClientContext release_context;
  petra::v1::ReleaseRequest release;
  release.set_job_id("job-7");
  petra::v1::ReleaseResponse released;
  EXPECT_TRUE(stub_->Release(&release_context, release, &released).ok());
  EXPECT_EQ(StageStatus(0).state(), petra::v1::StageStatus::STATE_IDLE);
}

// The shared-memory data channel against a real stage server: the bytes of
// each micro-batch wait in a slot of this test's ring, the message names
// it, the server copies them out and frees the slot (the ring never fills,
// however many micro-batches cross), a stale or forged reference gets a
// per-message error and the stream goes on, and the server keeps no ring
// mapped once the stream is over.
TEST_F(StageStreams, SharedMemorySlotsAreReadCheckedAndFreed) {
  AssignAndStartEval(6);
  absl::StatusOr<std::unique_ptr<link::SharedRing>> ring =
      link::SharedRing::Create(/*slots=*/2, 64 << 10);
  ASSERT_TRUE(ring.ok()) << ring.status();
  // Good(id) with its two tensors moved into a slot of the ring.
  auto slotted = [&](uint64_t id) {
    petra::v1::ForwardMessage m = Good(id);
    absl::StatusOr<link::SharedRing::Lease> lease =
        (*ring)->Acquire([] { return absl::OkStatus(); });
    EXPECT_TRUE(lease.ok());
    uint64_t offset = 0;
    for (petra::v1::Tensor* t :
         {m.mutable_activation()->mutable_first(), m.mutable_labels()}) {
      std::memcpy(lease->data + offset, t->data().data(), t->data().size());
      petra::v1::SlotRef* ref = t->mutable_slot();
      ref->set_ring((*ring)->name());
      ref->set_index(lease->index);
      ref->set_offset(offset);
      ref->set_sequence(lease->sequence);
      offset += (t->data().size() + 63) / 64 * 64;
      t->clear_data();
    }
    (*ring)->Publish(*lease);
    return m;
  };
  grpc::ClientContext context;
  auto stream = stub_->Forward(Keyed(&context));
  // Four micro-batches through a ring of two slots: each was read and its
  // slot freed before the next needed it.
  for (uint64_t id = 0; id < 4; ++id) {
    petra::v1::StreamReply r = Exchange(*stream, slotted(id));
    ASSERT_TRUE(r.has_done()) << r.DebugString();
    EXPECT_EQ(r.done().samples(), 4u);
  }
  EXPECT_TRUE((*ring)->Idle());
  // A replay of a slot already read, and a slot past the ring's end.
  petra::v1::ForwardMessage replay = slotted(4);
  petra::v1::StreamReply r = Exchange(*stream, replay);
  ASSERT_TRUE(r.has_done()) << r.DebugString();
  r = Exchange(*stream, replay);
  ASSERT_TRUE(r.has_error()) << r.DebugString();
  EXPECT_EQ(r.error().status().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.error().status().message(), HasSubstr("stale or repeated"));
  petra::v1::ForwardMessage past = slotted(5);
  past.mutable_activation()->mutable_first()->mutable_slot()->set_index(9);
  r = Exchange(*stream, past);
  ASSERT_TRUE(r.has_error()) << r.DebugString();
  EXPECT_THAT(r.error().status().message(), HasSubstr("which has 2"));
  // Both and neither: the bytes and a slot at once are refused too.
  petra::v1::ForwardMessage both = slotted(5);
  both.mutable_labels()->set_data(std::string(32, '\0'));
  r = Exchange(*stream, both);
  ASSERT_TRUE(r.has_error()) << r.DebugString();
  EXPECT_THAT(r.error().status().message(),
              HasSubstr("both bytes and a shared-memory slot"));
  // Every refused message freed its slot: the last micro-batch crosses.
  EXPECT_TRUE((*ring)->Idle());
  r = Exchange(*stream, slotted(5));
  ASSERT_TRUE(r.has_done()) << r.DebugString();
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  // The server unmapped the ring with the stream; only ours is left.
  for (int i = 0; i < 50 && link::CountRingMappings(stages_[0]->pid()) > 0;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(link::CountRingMappings(stages_[0]->pid()), 0);
  EXPECT_EQ(link::CountRingMappings(getpid()), 1);
}

TEST_F(StageStreams, RestoreCheckpointRefusesBadPiecesThenRestores) {
  AssignJobSeven();
  auto restore = [&](const std::string& job, uint64_t offset,
                     const std::string& data, uint64_t total,
                     petra::v1::RestoreCheckpointResponse* response) {
    grpc::ClientContext c;
    petra::v1::RestoreCheckpointRequest r;
    r.set_job_id(job);
    r.set_offset(offset);
    r.set_data(data);
    r.set_total_bytes(total);
    return stub_->RestoreCheckpoint(&c, r, response);
  };
  petra::v1::RestoreCheckpointResponse out;
  grpc::Status s = restore("job-9", 0, "x", 1, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  s = restore("job-7", 0, "x", 0, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("total_bytes 0 is not in"));
  s = restore("job-7", 0, "", 10, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = restore("job-7", 5, "xxxxx", 10, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(s.error_message(), HasSubstr("does not follow"));
  s = restore("job-7", 0, "xxxxxxxxxxxx", 10, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(s.error_message(), HasSubstr("past total_bytes 10"));
  // Complete but not a checkpoint.
  s = restore("job-7", 0, std::string(10, 'x'), 10, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << s.error_message();

  // A real checkpoint of this stage, sent back in two pieces.
  grpc::ClientContext c1;
  petra::v1::CheckpointRequest ckpt;
  ckpt.set_job_id("job-7");
  ckpt.set_name("epoch-3");
  ckpt.set_epoch(3);
  ckpt.set_samples_seen(96);
  petra::v1::CheckpointResponse written;
  ASSERT_TRUE(stub_->Checkpoint(&c1, ckpt, &written).ok());
  grpc::ClientContext c2;
  petra::v1::ReadCheckpointRequest read;
  read.set_job_id("job-7");
  read.set_path(written.path());
  petra::v1::ReadCheckpointResponse bytes;
  ASSERT_TRUE(stub_->ReadCheckpoint(&c2, read, &bytes).ok());
  const std::string& all = bytes.data();
  ASSERT_EQ(all.size(), written.size_bytes());
  const size_t half = all.size() / 2;
  s = restore("job-7", 0, all.substr(0, half), all.size(), &out);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(out.restored());
  EXPECT_EQ(out.received_bytes(), half);
  // The pieces go to the server's disk as they come, not to its memory.
  const std::filesystem::path uploads =
      dir_.path() + "/stage-0-1/job-7/restore";
  EXPECT_EQ(std::filesystem::file_size(uploads / "stage-0.pt.tmp"), half);
  s = restore("job-7", half, all.substr(half), all.size(), &out);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(out.restored());
  EXPECT_EQ(out.epoch(), 3u);
  EXPECT_EQ(out.samples_seen(), 96u);
  // Restored, the file is gone, as is the one that was not a checkpoint.
  EXPECT_TRUE(std::filesystem::is_empty(uploads));
  // The server goes on: the job is still held and answers.
  grpc::ClientContext c3;
  petra::v1::StageStatus status;
  ASSERT_TRUE(
      stub_->GetStatus(&c3, petra::v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.job_id(), "job-7");
}

TEST_F(StageStreams, ControlCallsRefuseBadRequests) {
  AssignAndStartEval(1);
  // A second job while the first is held.
  grpc::ClientContext c1;
  petra::v1::AssignRequest other;
  other.set_job_id("job-9");
  petra::v1::AssignResponse r1;
  grpc::Status s = stub_->Assign(&c1, other, &r1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // empty spec
  grpc::ClientContext c2;
  petra::v1::StartRequest start;
  start.set_job_id("job-9");
  start.set_phase(petra::v1::PHASE_TRAIN);
  start.set_micro_batches(1);
  petra::v1::StartResponse r2;
  s = stub_->Start(&c2, start, &r2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext c3;
  petra::v1::ReadCheckpointRequest read;
  read.set_job_id("job-7");
  read.set_path("job-7/../../etc/passwd");
  petra::v1::ReadCheckpointResponse r3;
  s = stub_->ReadCheckpoint(&c3, read, &r3);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext c4;
  petra::v1::CheckpointRequest ckpt;
  ckpt.set_job_id("job-7");
  ckpt.set_name("/abs");
  petra::v1::CheckpointResponse r4;
  s = stub_->Checkpoint(&c4, ckpt, &r4);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // A job placed on another device than the server's.
  grpc::ClientContext c6;
  petra::v1::AssignRequest elsewhere;
  elsewhere.set_job_id("job-10");
  *elsewhere.mutable_spec() = JobSevenSpec();
  elsewhere.set_stage_count(1);
  elsewhere.add_partition()->set_end(10);
  *elsewhere.mutable_layers() = elsewhere.partition(0);
  elsewhere.set_steps_per_epoch(1);
  SetTestDataKeys(elsewhere);
  elsewhere.set_device("cuda:0");
  petra::v1::AssignResponse r6;
  s = stub_->Assign(&c6, elsewhere, &r6);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(),
              HasSubstr("on \"cuda:0\" but this server runs on \"cpu\""));
  // A checkpoint path of another job.
  grpc::ClientContext c7;
  petra::v1::ReadCheckpointRequest foreign;
  foreign.set_job_id("job-7");
  foreign.set_path("job-8/epoch-1/stage-0.pt");
  petra::v1::ReadCheckpointResponse r7;
  s = stub_->ReadCheckpoint(&c7, foreign, &r7);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // Released, the server stops at once on SIGTERM (nothing to drain).
  grpc::ClientContext c5;
  petra::v1::ReleaseRequest release;
  release.set_job_id("job-7");
  petra::v1::ReleaseResponse r5;
  EXPECT_TRUE(stub_->Release(&c5, release, &r5).ok());
  EXPECT_EQ(stages_[0]->SignalAndWait(SIGTERM, std::chrono::seconds(10)), 0);
}

}  // namespace
}  // namespace petra::testing
