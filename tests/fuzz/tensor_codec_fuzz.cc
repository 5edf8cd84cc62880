// libFuzzer target: bytes as a peer could send them -> petra.v1 messages ->
// the checks and decoders a stage server runs on every message it receives
// (tensor validation and decoding, chunk reassembly, micro-batch assembly).
// Every input must end in a status, never a crash, a sanitizer report, an
// exception or an allocation the header alone asked for. Input format:
// fuzz_input.h.
#include <google/protobuf/stubs/logging.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "petra/v1/stage.pb.h"
#include "services/wire/stage_messages.h"
#include "services/wire/tensor_chunks.h"
#include "services/wire/tensor_codec.h"
#include "services/wire/tensor_validation.h"
#include "tests/fuzz/fuzz_input.h"

namespace petra::fuzz {
namespace {

using wire::TensorLimits;

// An invariant the code promises; a violation is a finding like a crash.
void Expect(bool condition) {
  if (!condition) __builtin_trap();
}

// Small enough that a run stays fast, large enough for real shapes.
TensorLimits SmallLimits() {
  TensorLimits l;
  l.max_bytes = 1 << 16;
  return l;
}

bool SameShape(const petra::v1::Tensor& a, const petra::v1::Tensor& b) {
  return std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(),
                    b.shape().end());
}

void OneTensor(const std::string& bytes) {
  petra::v1::Tensor t;
  if (!t.ParseFromString(bytes)) return;
  const TensorLimits limits = SmallLimits();
  const absl::Status valid = wire::ValidateTensor(t, limits, "t");
  const absl::StatusOr<at::Tensor> decoded =
      wire::DecodeTensor(t, limits, "activation.first");
  // The decoder refuses exactly what validation refuses, and says where.
  Expect(valid.ok() == decoded.ok());
  if (!decoded.ok()) {
    Expect(decoded.status().code() == absl::StatusCode::kInvalidArgument);
    Expect(absl::StartsWith(decoded.status().message(), "activation.first"));
    return;
  }
  // What decodes re-encodes to the same header and bytes.
  petra::v1::Tensor again;
  Expect(wire::EncodeTensor(*decoded, &again).ok());
  Expect(again.dtype() == t.dtype() && SameShape(again, t) &&
         again.data() == t.data());
}

void Chunks(const std::vector<std::string>& parts) {
  // The production limits: a header may claim up to 1 GiB, and nothing of
  // that may be allocated before the bytes arrive.
  wire::TensorAssembler assembler("gradient.first");
  for (const std::string& bytes : parts) {
    petra::v1::Tensor part;
    if (!part.ParseFromString(bytes)) continue;
    if (!assembler.Add(part).ok()) return;
    if (!assembler.complete()) continue;
    absl::StatusOr<petra::v1::Tensor> whole = assembler.Take();
    Expect(whole.ok() && !whole->has_chunk());
    absl::StatusOr<at::Tensor> t = wire::DecodeTensor(*whole);
    Expect(t.ok());
    Expect(static_cast<size_t>(t->numel() * t->element_size()) ==
           whole->data().size());
  }
}

// What the assemblers hand to the mailbox is what the engine can take.
void CheckBoundary(const model::TensorPair& p) {
  if (!p.a.defined()) {
    Expect(!p.b.defined());
    return;
  }
  // Floating point, or a language model's int64 token ids alone.
  Expect(p.a.dim() >= 1 &&
         (p.a.is_floating_point() ||
          (p.a.scalar_type() == torch::kInt64 && !p.b.defined())));
  if (p.b.defined()) {
    Expect(p.b.dim() >= 1 && p.b.size(0) == p.a.size(0));
  }
}

void ForwardStream(const std::vector<std::string>& parts) {
  wire::ForwardAssembler assembler;
  for (const std::string& bytes : parts) {
    petra::v1::ForwardMessage m;
    if (!m.ParseFromString(bytes)) continue;
    absl::StatusOr<std::optional<model::ForwardBatch>> r = assembler.Add(m);
    if (!r.ok()) {
      Expect(r.status().code() == absl::StatusCode::kInvalidArgument);
      continue;
    }
    if (!r->has_value()) continue;
    const model::ForwardBatch& p = **r;
    CheckBoundary(p.x);
    Expect(p.x.a.defined() || p.labels.defined());
    if (p.labels.defined()) {
      // A label per sample, or per token of each (a language model's).
      Expect(p.labels.scalar_type() == torch::kInt64 &&
             (p.labels.dim() == 1 || p.labels.dim() == 2));
      Expect(!p.x.a.defined() || p.labels.size(0) == p.x.a.size(0));
    }
    // Mode forward_gradient: every tangent is shaped like the activation.
    Expect(p.tangents.size() <= static_cast<size_t>(wire::kMaxTangents));
    for (const model::TensorPair& t : p.tangents) {
      Expect(p.x.a.defined() && t.a.defined() && t.a.sizes() == p.x.a.sizes());
      Expect(t.b.defined() == p.x.b.defined());
      Expect(!t.b.defined() || t.b.sizes() == p.x.b.sizes());
    }
  }
}

void BackwardStream(const std::vector<std::string>& parts) {
  wire::BackwardAssembler assembler;
  for (const std::string& bytes : parts) {
    petra::v1::BackwardMessage m;
    if (!m.ParseFromString(bytes)) continue;
    absl::StatusOr<std::optional<model::BackwardBatch>> r = assembler.Add(m);
    if (!r.ok()) {
      Expect(r.status().code() == absl::StatusCode::kInvalidArgument);
      continue;
    }
    if (!r->has_value()) continue;
    const model::BackwardBatch& p = **r;
    CheckBoundary(p.output);
    CheckBoundary(p.grad);
    if (!p.directional.empty()) {
      // Mode forward_gradient: derivatives, at most a diagnostic's true
      // gradient beside them, never an activation.
      Expect(p.directional.size() <= wire::kMaxTangents + 1u);
      Expect(!p.output.a.defined() && !p.output.b.defined());
      continue;
    }
    Expect(p.output.a.defined() && p.grad.a.defined());
    Expect(p.output.a.sizes() == p.grad.a.sizes());
    Expect(p.output.b.defined() == p.grad.b.defined());
  }
}

}  // namespace
}  // namespace petra::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One intra-op thread: nothing here is worth a pool.
  at::set_num_threads(1);
  // Protobuf logs every string field that is not UTF-8 as it refuses it;
  // millions of such lines would only slow the run.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace petra::fuzz;
  if (size < 1) return 0;
  const Mode mode = static_cast<Mode>(data[0] % 4);
  // No try/catch: an exception escaping here would escape a stream reaction
  // in the server and end the process; libFuzzer reports it with its text.
  switch (mode) {
    case kTensor:
      OneTensor(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
      break;
    case kChunks:
      Chunks(Unframed(data + 1, size - 1));
      break;
    case kForwardStream:
      ForwardStream(Unframed(data + 1, size - 1));
      break;
    case kBackwardStream:
      BackwardStream(Unframed(data + 1, size - 1));
      break;
  }
  return 0;
}
