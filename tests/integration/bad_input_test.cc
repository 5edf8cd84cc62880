// Bad input against the real servers, over raw gRPC: paths that try to
// leave --state-dir or --data-root, stream messages out of order or from the
// wrong stage, and peers that vanish in the middle of a micro-batch. Each is
// refused with the field or reason named, and the server goes on serving.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "petra/v1/coordinator.grpc.pb.h"
#include "petra/v1/stage.grpc.pb.h"
#include "tests/integration/binaries.h"
#include "tests/integration/probes.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/test_messages.h"

namespace petra::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using ForwardStream =
    grpc::ClientReaderWriter<petra::v1::ForwardMessage, petra::v1::StreamReply>;
using BackwardStream = grpc::ClientReaderWriter<petra::v1::BackwardMessage,
                                                petra::v1::StreamReply>;

// One stage server with a state dir of its own, and a directory outside it
// that a symbolic link inside points to.
class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    state_dir_ = dir_.path() + "/stage";
    outside_ = dir_.path() + "/outside";
    fs::create_directories(state_dir_);
    fs::create_directories(outside_);
    std::ofstream(outside_ + "/secret") << "not for clients";
    stage_ = std::make_unique<Subprocess>(
        kStage, std::vector<std::string>{
                    "--listen", "127.0.0.1:0", "--metrics-listen", "",
                    "--threads", "1", "--state-dir", state_dir_, "--insecure"});
    const int port =
        NumberAfter(stage_->WaitForLine("listening on port"), "port ");
    ASSERT_GT(port, 0) << stage_->err();
    address_ = Loopback(port);
    stub_ = petra::v1::StageService::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  static petra::v1::AssignRequest Assignment(const std::string& job, int index,
                                             int count) {
    petra::v1::AssignRequest a;
    a.set_job_id(job);
    petra::v1::JobSpec* spec = a.mutable_spec();
    spec->mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
    spec->mutable_model()->set_width(0.125);
    spec->mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
    spec->mutable_partition()->set_stage_count(count);
    a.set_stage_index(index);
    a.set_stage_count(count);
    // Stage j of `count` takes blocks [j, j + 1), the last one the rest.
    for (int j = 0; j < count; ++j) {
      petra::v1::LayerRange* r = a.add_partition();
      r->set_begin(j);
      r->set_end(j + 1 == count ? 10 : j + 1);
    }
    *a.mutable_layers() = a.partition(index);
    a.set_steps_per_epoch(100);
    SetTestDataKeys(a);
    // A neighbour nobody listens on: the pass never gets that far.
    if (index + 1 < count) {
      a.set_next_address(Loopback(UnusedLoopbackPort()));
    }
    if (index > 0) {
      a.set_previous_address(Loopback(UnusedLoopbackPort()));
    }
    return a;
  }

  grpc::Status Assign(const petra::v1::AssignRequest& a) {
    grpc::ClientContext c;
    petra::v1::AssignResponse r;
    return stub_->Assign(&c, a, &r);
  }

  void Start(const std::string& job, petra::v1::Phase phase, int batches) {
    grpc::ClientContext c;
    petra::v1::StartRequest start;
    start.set_job_id(job);
    start.set_phase(phase);
    start.set_epoch(1);
    start.set_micro_batches(batches);
    petra::v1::StartResponse r;
    grpc::Status s = stub_->Start(&c, start, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  grpc::Status Release(const std::string& job) {
    grpc::ClientContext c;
    petra::v1::ReleaseRequest r;
    r.set_job_id(job);
    petra::v1::ReleaseResponse out;
    return stub_->Release(&c, r, &out);
  }

  petra::v1::StageStatus Status() {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    petra::v1::StageStatus s;
    grpc::Status status = stub_->GetStatus(&c, {}, &s);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return s;
  }

  // Four 28x28 images with labels for job-7, from the coordinator.
  static petra::v1::ForwardMessage Images(uint64_t id, petra::v1::Phase phase) {
    return ImagesWithLabels(id, phase);
  }

  // A gradient pair of job-7 from stage `sender`.
  static petra::v1::BackwardMessage Gradient(uint64_t id, int sender) {
    petra::v1::BackwardMessage m;
    m.set_job_id("job-7");
    m.set_micro_batch_id(id);
    m.set_sender_stage(sender);
    m.set_last_part(true);
    for (petra::v1::TensorPair* p :
         {m.mutable_activation(), m.mutable_gradient()}) {
      petra::v1::Tensor* t = p->mutable_first();
      t->set_dtype(petra::v1::DTYPE_FLOAT32);
      t->add_shape(4);
      t->add_shape(2);
      t->set_data(std::string(8 * sizeof(float), '\0'));
    }
    return m;
  }

  // Half-closes and reads what is left: Finish waits for unread replies.
  template <typename Stream>
  static grpc::Status Close(Stream& stream) {
    stream.WritesDone();
    petra::v1::StreamReply reply;
    while (stream.Read(&reply)) {
    }
    return stream.Finish();
  }

  // The error a refused message got: its code and text.
  template <typename Stream, typename Message>
  static std::pair<grpc::StatusCode, std::string> Refusal(Stream& stream,
                                                          const Message& m) {
    petra::v1::StreamReply r = Exchange(stream, m);
    EXPECT_TRUE(r.has_error()) << r.DebugString();
    EXPECT_EQ(r.error().micro_batch_id(), m.micro_batch_id());
    return {static_cast<grpc::StatusCode>(r.error().status().code()),
            r.error().status().message()};
  }

  TempDir dir_;
  std::string state_dir_, outside_;
  std::unique_ptr<Subprocess> stage_;
  std::string address_;
  std::unique_ptr<petra::v1::StageService::Stub> stub_;
};

TEST_F(BadInput, StagePathsStayInsideTheStateDir) {
  // Job ids name one directory.
  for (const char* id : {"../evil", "a/b", "/abs", ".."}) {
    grpc::Status s = Assign(Assignment(id, 0, 1));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << id;
    EXPECT_THAT(s.error_message(), HasSubstr("job_id")) << id;
  }
  // A checkpoint to restore: absolute, climbing, or through a link out.
  fs::create_directory_symlink(outside_, state_dir_ + "/escape");
  for (const char* restore :
       {"/etc/passwd", "../outside/secret", "escape/secret"}) {
    petra::v1::AssignRequest a = Assignment("job-7", 0, 1);
    a.set_restore_checkpoint(restore);
    grpc::Status s = Assign(a);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << restore;
    EXPECT_THAT(s.error_message(), HasSubstr("restore_checkpoint")) << restore;
  }
  EXPECT_EQ(Status().state(), petra::v1::StageStatus::STATE_IDLE);

  ASSERT_TRUE(Assign(Assignment("job-7", 0, 1)).ok());
  // A checkpoint name that climbs out, and a job directory that is a link
  // out of the state dir: nothing is written there.
  auto checkpoint = [&](const std::string& name) {
    grpc::ClientContext c;
    petra::v1::CheckpointRequest r;
    r.set_job_id("job-7");
    r.set_name(name);
    petra::v1::CheckpointResponse out;
    return stub_->Checkpoint(&c, r, &out);
  };
  grpc::Status s = checkpoint("../../outside");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("name"));
  fs::create_directory_symlink(outside_, state_dir_ + "/job-7");
  s = checkpoint("epoch-1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("name \"job-7/epoch-1/stage-0.pt\""));
  EXPECT_THAT(s.error_message(), HasSubstr("resolves outside"));
  EXPECT_THAT(s.error_message(), Not(HasSubstr(outside_)));
  EXPECT_FALSE(fs::exists(outside_ + "/epoch-1"));

  // Reading back: through the link, or climbing out.
  auto read = [&](const std::string& path, std::string* data) {
    grpc::ClientContext c;
    petra::v1::ReadCheckpointRequest r;
    r.set_job_id("job-7");
    r.set_path(path);
    petra::v1::ReadCheckpointResponse out;
    grpc::Status status = stub_->ReadCheckpoint(&c, r, &out);
    *data = out.data();
    return status;
  };
  std::string data;
  s = read("job-7/secret", &data);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("path \"job-7/secret\""));
  EXPECT_TRUE(data.empty());
  s = read("job-7/../escape/secret", &data);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(data.empty());

  // With the link gone, checkpoints are written and read inside as usual.
  fs::remove(state_dir_ + "/job-7");
  ASSERT_TRUE(checkpoint("epoch-1").ok());
  s = read("job-7/epoch-1/stage-0.pt", &data);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(data.empty());
  // A directory is not a checkpoint.
  s = read("job-7/epoch-1", &data);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(Release("job-7").ok());
  EXPECT_EQ(Status().state(), petra::v1::StageStatus::STATE_IDLE);
}

// Ranges past the network's 10 blocks once crashed the server (the memory
// estimate read blocks past the end before anything checked the range).
TEST_F(BadInput, AssignRangesOutsideTheNetworkAreRefusedAndTheServerStaysUp) {
  struct Case {
    const char* name;
    std::function<void(petra::v1::AssignRequest*)> bend;
    const char* says;
  };
  auto range = [](uint32_t begin, uint32_t end) {
    return [begin, end](petra::v1::AssignRequest* a) {
      a->mutable_partition(0)->set_begin(begin);
      a->mutable_partition(0)->set_end(end);
      *a->mutable_layers() = a->partition(0);
    };
  };
  const std::vector<Case> cases = {
      {"far past the end", range(0, 1000), "end by 10"},
      {"one past the end", range(0, 11), "end by 10"},
      {"short of the end", range(0, 9), "the network has 10"},
      {"backwards", range(5, 3), "must start at 0"},
      {"empty", range(0, 0), "at least one block"},
      {"at the top of uint32", range(0xFFFFFFFFu, 0xFFFFFFFFu),
       "must start at 0"},
      {"layers other than the partition's",
       [](petra::v1::AssignRequest* a) { a->mutable_layers()->set_end(1000); },
       "are not stage 0's range"},
      {"no partition",
       [](petra::v1::AssignRequest* a) { a->clear_partition(); },
       "do not fit together"},
  };
  for (const Case& c : cases) {
    petra::v1::AssignRequest a = Assignment("job-7", 0, 1);
    c.bend(&a);
    grpc::Status s = Assign(a);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.name;
    EXPECT_THAT(s.error_message(), HasSubstr(c.says)) << c.name;
    EXPECT_EQ(Status().state(), petra::v1::StageStatus::STATE_IDLE) << c.name;
  }
  // The second stage of two, with a first range past the end.
  petra::v1::AssignRequest a = Assignment("job-7", 1, 2);
  a.mutable_partition(0)->set_end(40);
  EXPECT_EQ(Assign(a).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(stage_->Running()) << stage_->err();
  ASSERT_TRUE(Assign(Assignment("job-7", 0, 1)).ok());
}

// The data keys an Assign brings: the stage's own and its neighbours',
// each in the form the coordinator draws, none for a neighbour it lacks.
TEST_F(BadInput, AssignDataKeysOfTheWrongFormAreRefused) {
  struct Case {
    const char* name;
    petra::v1::AssignRequest request;
    const char* says;
  };
  std::vector<Case> cases;
  petra::v1::AssignRequest a = Assignment("job-7", 0, 2);
  a.clear_data_key();
  cases.push_back({"no key", a, "data_key must be 64 lowercase hex digits"});
  a = Assignment("job-7", 0, 2);
  a.set_data_key(std::string(64, 'Z'));
  cases.push_back({"not hex", a, "data_key must be 64 lowercase hex digits"});
  a = Assignment("job-7", 0, 2);
  a.clear_next_data_key();
  cases.push_back({"no key for the next stage", a,
                   "next_data_key must be 64 lowercase hex digits"});
  a = Assignment("job-7", 0, 2);
  a.set_previous_data_key(kTestDataKey);
  cases.push_back({"a key for a neighbour stage 0 lacks", a,
                   "previous_data_key must be empty"});
  for (const Case& c : cases) {
    grpc::Status s = Assign(c.request);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.name;
    EXPECT_THAT(s.error_message(), HasSubstr(c.says)) << c.name;
  }
  EXPECT_EQ(Status().state(), petra::v1::StageStatus::STATE_IDLE);
}

TEST_F(BadInput, OutOfOrderWrongSenderAndFloodingMessagesAreRefused) {
  // Stage 0 of 2, training 100 micro-batches: gradients come from stage 1;
  // 2 x 2 = 4 credits per stream.
  ASSERT_TRUE(Assign(Assignment("job-7", 0, 2)).ok());
  Start("job-7", petra::v1::PHASE_TRAIN, 100);
  grpc::ClientContext context;
  std::unique_ptr<BackwardStream> down = stub_->Backward(Keyed(&context));

  auto [code, text] = Refusal(*down, Gradient(0, 0));
  EXPECT_EQ(code, grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(text, HasSubstr("takes gradients from stage 1"));
  std::tie(code, text) = Refusal(*down, Gradient(0, 5));
  EXPECT_EQ(code, grpc::StatusCode::PERMISSION_DENIED);

  // Micro-batch 2 is taken in silently; 1 after it is out of order, 2 again
  // a duplicate.
  ASSERT_TRUE(down->Write(Gradient(2, 1)));
  std::tie(code, text) = Refusal(*down, Gradient(1, 1));
  EXPECT_EQ(code, grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(text, HasSubstr("out of order: micro-batch 2 came before it"));
  std::tie(code, text) = Refusal(*down, Gradient(2, 1));
  EXPECT_EQ(code, grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(text, HasSubstr("duplicate"));
  // Far ahead of the credits granted: a peer ignoring them cannot queue
  // the whole pass in the stage's memory.
  std::tie(code, text) = Refusal(*down, Gradient(50, 1));
  EXPECT_EQ(code, grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(text, HasSubstr("beyond the credit window"));
  // Past the pass, and for another job.
  std::tie(code, text) = Refusal(*down, Gradient(100, 1));
  EXPECT_EQ(code, grpc::StatusCode::OUT_OF_RANGE);
  petra::v1::BackwardMessage stranger = Gradient(3, 1);
  stranger.set_job_id("job-8");
  std::tie(code, text) = Refusal(*down, stranger);
  EXPECT_EQ(code, grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(text, HasSubstr("unknown job \"job-8\""));

  // Forward: activations only from the coordinator (-1) on stage 0, in
  // order, and no labels on a stage that is not the last.
  grpc::ClientContext up_context;
  std::unique_ptr<ForwardStream> up = stub_->Forward(Keyed(&up_context));
  petra::v1::ForwardMessage from_stage = Images(0, petra::v1::PHASE_TRAIN);
  from_stage.set_sender_stage(1);
  from_stage.clear_labels();
  std::tie(code, text) = Refusal(*up, from_stage);
  EXPECT_EQ(code, grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(text, HasSubstr("takes them from the coordinator (-1)"));
  std::tie(code, text) = Refusal(*up, Images(0, petra::v1::PHASE_TRAIN));
  EXPECT_EQ(code, grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(text, HasSubstr("labels are taken only by the last stage"));
  petra::v1::ForwardMessage three = Images(3, petra::v1::PHASE_TRAIN);
  three.clear_labels();
  ASSERT_TRUE(up->Write(three));
  petra::v1::ForwardMessage one = Images(1, petra::v1::PHASE_TRAIN);
  one.clear_labels();
  std::tie(code, text) = Refusal(*up, one);
  EXPECT_EQ(code, grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(text, HasSubstr("forward activation of micro-batch 1 arrived "
                              "out of order"));
  petra::v1::ForwardMessage eval = Images(2, petra::v1::PHASE_EVAL);
  eval.clear_labels();
  std::tie(code, text) = Refusal(*up, eval);
  EXPECT_EQ(code, grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(text, HasSubstr("is for phase PHASE_EVAL"));

  // The server answers and lets the job go.
  EXPECT_EQ(Status().state(), petra::v1::StageStatus::STATE_RUNNING);
  up_context.TryCancel();
  context.TryCancel();
  up->Finish().IgnoreError();
  down->Finish().IgnoreError();
  EXPECT_TRUE(Release("job-7").ok());
  EXPECT_EQ(Status().state(), petra::v1::StageStatus::STATE_IDLE);

  // The last stage computes its own gradients: no backward from anyone.
  ASSERT_TRUE(Assign(Assignment("job-7", 1, 2)).ok());
  Start("job-7", petra::v1::PHASE_TRAIN, 4);
  grpc::ClientContext last_context;
  std::unique_ptr<BackwardStream> to_last =
      stub_->Backward(Keyed(&last_context));
  std::tie(code, text) = Refusal(*to_last, Gradient(0, 2));
  EXPECT_EQ(code, grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(text, HasSubstr("is the last stage"));
  last_context.TryCancel();
  to_last->Finish().IgnoreError();
  EXPECT_TRUE(Release("job-7").ok());
  EXPECT_EQ(Status().state(), petra::v1::StageStatus::STATE_IDLE);
}

TEST_F(BadInput, APeerVanishingMidMicroBatchDoesNotWedgeTheStage) {
  // One stage holding the whole network, evaluating.
  ASSERT_TRUE(Assign(Assignment("job-7", 0, 1)).ok());
  Start("job-7", petra::v1::PHASE_EVAL, 2);
  // The first half of micro-batch 0's images as a chunk, not its last part.
  const petra::v1::ForwardMessage whole = Images(0, petra::v1::PHASE_EVAL);
  petra::v1::ForwardMessage first_half = whole;
  first_half.set_last_part(false);
  first_half.clear_labels();
  petra::v1::Tensor* x = first_half.mutable_activation()->mutable_first();
  x->mutable_chunk()->set_offset(0);
  x->mutable_chunk()->set_total_bytes(whole.activation().first().data().size());
  x->mutable_data()->resize(x->data().size() / 2);

  {  // Cancelled after the first chunk (a peer that crashed).
    grpc::ClientContext c;
    std::unique_ptr<ForwardStream> s = stub_->Forward(Keyed(&c));
    ASSERT_TRUE(s->Write(first_half));
    c.TryCancel();
    EXPECT_FALSE(s->Finish().ok());
  }
  {  // Half-closed after the first chunk, the rest never sent.
    grpc::ClientContext c;
    std::unique_ptr<ForwardStream> s = stub_->Forward(Keyed(&c));
    ASSERT_TRUE(s->Write(first_half));
    grpc::Status finished = Close(*s);
    EXPECT_TRUE(finished.ok()) << finished.error_message();
  }
  // The server answers, and a new stream completes the pass.
  EXPECT_EQ(Status().state(), petra::v1::StageStatus::STATE_RUNNING);
  {
    grpc::ClientContext c;
    std::unique_ptr<ForwardStream> s = stub_->Forward(Keyed(&c));
    for (uint64_t id : {0, 1}) {
      petra::v1::StreamReply r =
          Exchange(*s, Images(id, petra::v1::PHASE_EVAL));
      ASSERT_TRUE(r.has_done()) << r.DebugString();
      EXPECT_EQ(r.done().micro_batch_id(), id);
    }
    EXPECT_TRUE(Close(*s).ok());
  }

  // Next pass: a whole micro-batch, then the stream dropped without
  // WritesDone while the stage works on it.
  Start("job-7", petra::v1::PHASE_EVAL, 2);
  {
    grpc::ClientContext c;
    std::unique_ptr<ForwardStream> s = stub_->Forward(Keyed(&c));
    ASSERT_TRUE(s->Write(Images(0, petra::v1::PHASE_EVAL)));
    // Its completion: the stage took it (its credit may be owed, gathered
    // with later ones).
    petra::v1::StreamReply r;
    do {
      ASSERT_TRUE(s->Read(&r));
    } while (!r.has_done());
    c.TryCancel();
    s->Finish().IgnoreError();
  }
  {
    grpc::ClientContext c;
    std::unique_ptr<ForwardStream> s = stub_->Forward(Keyed(&c));
    // Micro-batch 0 arrived before the drop: sent again, it is a duplicate.
    petra::v1::StreamReply r = Exchange(*s, Images(0, petra::v1::PHASE_EVAL));
    ASSERT_TRUE(r.has_error()) << r.DebugString();
    EXPECT_EQ(r.error().status().code(), grpc::StatusCode::ALREADY_EXISTS);
    // Completions go to the newest stream that brought labels: micro-batch
    // 0's may come here too, before 1's.
    ASSERT_TRUE(s->Write(Images(1, petra::v1::PHASE_EVAL)));
    std::set<uint64_t> done;
    while (done.count(1) == 0 && s->Read(&r)) {
      EXPECT_FALSE(r.has_error()) << r.DebugString();
      if (r.has_done()) done.insert(r.done().micro_batch_id());
    }
    EXPECT_EQ(done.count(1), 1u);
    EXPECT_TRUE(Close(*s).ok());
  }
  // Mid-pass, a stream dropped half way through a micro-batch: Release
  // still returns the stage to idle at once.
  Start("job-7", petra::v1::PHASE_EVAL, 2);
  {
    grpc::ClientContext c;
    std::unique_ptr<ForwardStream> s = stub_->Forward(Keyed(&c));
    ASSERT_TRUE(s->Write(first_half));
    c.TryCancel();
    s->Finish().IgnoreError();
  }
  EXPECT_EQ(Status().state(), petra::v1::StageStatus::STATE_RUNNING);
  EXPECT_TRUE(Release("job-7").ok());
  EXPECT_EQ(Status().state(), petra::v1::StageStatus::STATE_IDLE);
  // And it takes the next job.
  ASSERT_TRUE(Assign(Assignment("job-8", 0, 1)).ok());
  EXPECT_EQ(Status().job_id(), "job-8");
}

TEST_F(BadInput, CoordinatorRefusesDatasetPathsAndJobIdsLeavingItsDirectories) {
  const std::string data_root = dir_.path() + "/datasets";
  fs::create_directories(data_root + "/fashion-mnist");
  fs::create_directory_symlink(outside_, data_root + "/escape");
  Subprocess coordinator(
      kCoordinator,
      {"--listen", "127.0.0.1:0", "--metrics-listen", "", "--stages", address_,
       "--data-root", data_root, "--state-dir", dir_.path() + "/coordinator"});
  const int port =
      NumberAfter(coordinator.WaitForLine("listening on port"), "port ");
  ASSERT_GT(port, 0) << coordinator.err();
  auto stub = petra::v1::CoordinatorService::NewStub(
      grpc::CreateChannel(Loopback(port), grpc::InsecureChannelCredentials()));

  auto submit = [&](const std::string& path, const std::string& resume) {
    petra::v1::SubmitJobRequest r;
    petra::v1::JobSpec* spec = r.mutable_spec();
    spec->mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
    spec->mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
    spec->mutable_dataset()->set_path(path);
    spec->mutable_partition()->set_stage_count(1);
    spec->mutable_checkpoint()->set_resume_from_job(resume);
    grpc::ClientContext c;
    petra::v1::Job job;
    return stub->SubmitJob(&c, r, &job);
  };
  for (const std::string& path :
       {std::string("../../etc"), std::string("/etc"), std::string("escape"),
        std::string("escape/x"), outside_, data_root + "/../outside"}) {
    grpc::Status s = submit(path, "");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << path;
    EXPECT_THAT(s.error_message(), HasSubstr("dataset.path")) << path;
  }
  grpc::Status s = submit("", "../job-1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("checkpoint.resume_from_job"));
  s = submit("", "job-404");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  // Job ids a client names are looked up, never used as paths.
  for (const char* id : {"../../etc/passwd", "/etc/passwd", ""}) {
    grpc::ClientContext c;
    petra::v1::ExportJobRequest r;
    r.set_job_id(id);
    std::unique_ptr<grpc::ClientReader<petra::v1::ExportChunk>> reader =
        stub->ExportJob(&c, r);
    petra::v1::ExportChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk)) << id;
    s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << id;
    EXPECT_THAT(s.error_message(), HasSubstr("no job with id")) << id;
  }
  // Nothing was queued; the coordinator still answers.
  grpc::ClientContext c;
  petra::v1::ListJobsResponse listed;
  ASSERT_TRUE(stub->ListJobs(&c, {}, &listed).ok());
  EXPECT_EQ(listed.jobs_size(), 0);
}

}  // namespace
}  // namespace petra::testing
