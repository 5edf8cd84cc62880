// A network given an export's weights: every parameter and buffer of block
// i takes the export's "blocks.<i>.<name>", which must be there and of its
// shape. Shared by the TorchScript export (which also registers each tensor
// in its module) and text generation from a plain export.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "services/engine/state_file.h"
#include "services/model/network.h"

namespace petra::engine {

// Copies each tensor in, then calls `visit` (may be null) with its export
// name, the network's tensor and whether it is a parameter. Every block in
// eval(). INVALID_ARGUMENT naming a missing or misshapen tensor.
absl::Status LoadExportedWeights(
    model::Network& net, const NamedTensors& exported,
    const std::function<void(const std::string& name, torch::Tensor& t,
                             bool parameter)>& visit = nullptr);

}  // namespace petra::engine
