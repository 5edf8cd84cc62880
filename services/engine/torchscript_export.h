// The self-contained export: a job's trained network as a TorchScript module
// that torch.jit.load runs in Python or C++ with no petra code. Built by
// tracing our own C++ evaluation forward (BatchNorm running statistics,
// eval mode) over a module that holds the weights under the export's names,
// so the module's state_dict is the plain export's too; the input
// normalisation the data pipeline applies, from the export's own "input.*"
// tensors (export_input.h), is folded in, and the class names are the
// module's `class_names` attribute.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "petra/v1/job.pb.h"
#include "services/engine/state_file.h"

namespace petra::engine {

// The module's forward takes float images N x C x H x W with pixel values
// in [0, 1], normalises them as training did and returns the logits
// N x classes. A language model's takes token ids, int64 N x seq_len (the
// traced length: a shorter context goes right-padded, which causal
// attention keeps from every earlier position), and returns the next
// token's logits at every position, N x seq_len x vocab. `resolved`: the job's
// spec (its model); `exported`: the plain export's tensors
// ("blocks.<i>.<name>", every one the network has, of its shape, and
// "input.*"). INVALID_ARGUMENT naming a missing or misshapen tensor.
absl::StatusOr<std::string> EncodeTorchScript(
    const petra::v1::JobSpec& resolved, const NamedTensors& exported);

}  // namespace petra::engine
