// The export's "input.*" tensors: what a trained network expects of its
// input (job.proto's Preprocessing), carried in the same file as its
// weights, so that `torch.load` of an export (and petra.models, and the
// TorchScript export) has all it needs without the data or petra's pipeline:
//   input.mean, input.std    float32 [C]: (x - mean) / std on pixel values in
//                            [0, 1] (0 and 1 when the job did not normalise)
//   input.shape              int64 [3]: C, H, W
//   input.class_names        uint8: the names in UTF-8, each ended by a NUL
//   input.model              uint8: the network (job.proto's ModelSpec) as
//                            JSON, so that an export describes itself
//   input.tokenizer          uint8: a language model's SentencePiece model,
//                            empty for the bytes tokenizer
// The last two are absent from exports written before they existed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/engine/state_file.h"

namespace petra::engine {

std::vector<std::pair<std::string, torch::Tensor>> InputTensors(
    const petra::v1::Preprocessing& preprocessing);

// The Preprocessing the tensors hold. NOT_FOUND when `exported` has none of
// them (an export written before they existed); INVALID_ARGUMENT naming the
// tensor when one is missing or malformed.
absl::StatusOr<petra::v1::Preprocessing> PreprocessingFromTensors(
    const NamedTensors& exported);

}  // namespace petra::engine
