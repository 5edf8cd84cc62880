// Writes the seeds of petra_fuzz_tensor_codec into a directory: small but
// well-formed examples of each mode (fuzz_input.h), encoded by the real
// codec, so the fuzzer starts from inputs that reach deep into the checks.
//   petra_fuzz_seeds tests/fuzz/corpus/tensor_codec
#include <torch/torch.h>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "services/wire/stage_messages.h"
#include "services/wire/tensor_chunks.h"
#include "services/wire/tensor_codec.h"
#include "tests/fuzz/fuzz_input.h"

namespace petra::fuzz {
namespace {

std::string Encoded(const torch::Tensor& t) {
  petra::v1::Tensor wire;
  if (!wire::EncodeTensor(t, &wire).ok()) std::abort();
  return wire.SerializeAsString();
}

template <typename Message>
std::vector<std::string> Serialized(const std::vector<Message>& parts) {
  std::vector<std::string> out;
  for (const Message& m : parts) out.push_back(m.SerializeAsString());
  return out;
}

model::MicroBatchHeader Header(uint64_t id, int sender) {
  model::MicroBatchHeader h;
  h.job_id = "job-1";
  h.micro_batch_id = id;
  h.step = 1;
  h.sender_stage = sender;
  h.epoch = 1;
  return h;
}

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: petra_fuzz_seeds DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
  };
  torch::manual_seed(1);
  // Whole tensors of several dtypes and ranks, a scalar and an empty one.
  write("tensor-float32",
        std::string(1, kTensor) + Encoded(torch::randn({2, 3, 4})));
  write("tensor-int64",
        std::string(1, kTensor) + Encoded(torch::arange(5, torch::kInt64)));
  write("tensor-uint8",
        std::string(1, kTensor) + Encoded(torch::ones({3, 3}, torch::kUInt8)));
  write("tensor-float16-scalar",
        std::string(1, kTensor) + Encoded(torch::ones({}, torch::kFloat16)));
  write("tensor-empty", std::string(1, kTensor) + Encoded(torch::ones({0, 3})));

  // One tensor in four chunks.
  petra::v1::Tensor whole;
  if (!wire::EncodeTensor(torch::randn({2, 8}), &whole).ok()) return 1;
  write("chunks-4", Framed(kChunks, Serialized(wire::SplitTensor(whole, 16))));

  // Forward: a pair with labels in one message, the same in chunks, and a
  // labels-only message.
  model::ForwardBatch f;
  f.header = Header(0, -1);
  f.x = {torch::randn({2, 2, 2, 2}), torch::randn({2, 2, 2, 2})};
  f.labels = torch::tensor({1, 7}, torch::kInt64);
  write("forward-one-part",
        Framed(kForwardStream, Serialized(*wire::EncodeForward(f, 1 << 20))));
  write("forward-chunked",
        Framed(kForwardStream, Serialized(*wire::EncodeForward(f, 24))));
  model::ForwardBatch labels_only;
  labels_only.header = Header(3, -1);
  labels_only.labels = torch::tensor({4}, torch::kInt64);
  std::vector<std::string> two = Serialized(*wire::EncodeForward(f, 1 << 20));
  for (const std::string& s :
       Serialized(*wire::EncodeForward(labels_only, 1 << 20))) {
    two.push_back(s);
  }
  write("forward-two-micro-batches", Framed(kForwardStream, two));

  // Backward: activation and gradient pairs, whole and chunked.
  model::BackwardBatch b;
  b.header = Header(0, 1);
  b.output = {torch::randn({2, 3}), torch::randn({2, 3})};
  b.grad = {torch::randn({2, 3}), torch::randn({2, 3})};
  write("backward-one-part",
        Framed(kBackwardStream, Serialized(*wire::EncodeBackward(b, 1 << 20))));
  write("backward-chunked",
        Framed(kBackwardStream, Serialized(*wire::EncodeBackward(b, 12))));

  // Mode forward_gradient: a forward with labels and two tangents, chunked;
  // a backward of derivatives alone, and one with a diagnostic's gradient.
  model::ForwardBatch fg = f;
  fg.header = Header(5, 1);
  fg.tangents = {{torch::randn({2, 2, 2, 2}), torch::randn({2, 2, 2, 2})},
                 {torch::randn({2, 2, 2, 2}), torch::randn({2, 2, 2, 2})}};
  write("forward-tangents-chunked",
        Framed(kForwardStream, Serialized(*wire::EncodeForward(fg, 40))));
  model::BackwardBatch d;
  d.header = Header(5, 2);
  d.directional = {0.5, -1.25};
  write("backward-directional",
        Framed(kBackwardStream, Serialized(*wire::EncodeBackward(d, 1 << 20))));
  d.grad = {torch::randn({2, 3}), torch::randn({2, 3})};
  write("backward-directional-gradient",
        Framed(kBackwardStream, Serialized(*wire::EncodeBackward(d, 12))));
  return 0;
}

}  // namespace
}  // namespace petra::fuzz

int main(int argc, char** argv) { return petra::fuzz::Main(argc, argv); }
