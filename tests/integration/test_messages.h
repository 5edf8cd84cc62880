// Stage stream messages the integration tests send by hand.
#pragma once

#include <grpcpp/client_context.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "petra/v1/stage.pb.h"
#include "services/wire/data_key.h"

namespace petra::testing {

// The data key the tests' hand-made assignments give every stage
// (AssignRequest.data_key and its neighbours'), and that their streams
// present.
inline const std::string kTestDataKey =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// Gives `a` the test key for itself and for the neighbours it has.
inline void SetTestDataKeys(petra::v1::AssignRequest& a) {
  a.set_data_key(kTestDataKey);
  if (a.stage_index() + 1 < a.stage_count()) a.set_next_data_key(kTestDataKey);
  if (a.stage_index() > 0) a.set_previous_data_key(kTestDataKey);
}

// Job-7 whole on one stage (RevNet18 at width 0.125, Fashion-MNIST's
// shape: ImagesWithLabels feeds it), with the test keys.
inline petra::v1::AssignRequest JobSevenOnOneStage() {
  petra::v1::AssignRequest a;
  a.set_job_id("job-7");
  petra::v1::JobSpec* spec = a.mutable_spec();
  spec->mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  spec->mutable_model()->set_width(0.125);
  spec->mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
  spec->mutable_partition()->set_stage_count(1);
  a.set_stage_count(1);
  a.mutable_layers()->set_end(10);
  a.add_partition()->set_end(10);
  a.set_steps_per_epoch(100);
  SetTestDataKeys(a);
  return a;
}

// Presents the test key on the call of `context` (a data stream).
inline grpc::ClientContext* Keyed(grpc::ClientContext* context) {
  wire::PresentDataKey(context, kTestDataKey);
  return context;
}

// Four zero 28x28 images with their labels for job-7, as the coordinator
// feeds a one-stage job.
inline petra::v1::ForwardMessage ImagesWithLabels(uint64_t id,
                                                  petra::v1::Phase phase) {
  petra::v1::ForwardMessage m;
  m.set_job_id("job-7");
  m.set_micro_batch_id(id);
  m.set_phase(phase);
  m.set_sender_stage(-1);
  m.set_last_part(true);
  petra::v1::Tensor* x = m.mutable_activation()->mutable_first();
  x->set_dtype(petra::v1::DTYPE_FLOAT32);
  for (int64_t d : {4, 1, 28, 28}) x->add_shape(d);
  x->set_data(std::string(4 * 28 * 28 * sizeof(float), '\0'));
  petra::v1::Tensor* y = m.mutable_labels();
  y->set_dtype(petra::v1::DTYPE_INT64);
  y->add_shape(4);
  y->set_data(std::string(4 * sizeof(int64_t), '\0'));
  return m;
}

// Writes `m` on a stage stream and returns the next reply that is not a
// credit.
template <typename Stream, typename Message>
petra::v1::StreamReply Exchange(Stream& stream, const Message& m) {
  EXPECT_TRUE(stream.Write(m));
  petra::v1::StreamReply reply;
  while (stream.Read(&reply)) {
    if (!reply.has_credit()) return reply;
  }
  ADD_FAILURE() << "the stream ended";
  return reply;
}

}  // namespace petra::testing
