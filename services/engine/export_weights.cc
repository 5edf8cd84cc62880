#include "services/engine/export_weights.h"

#include <torch/torch.h>

#include <set>

#include "absl/strings/str_cat.h"

namespace petra::engine {

absl::Status LoadExportedWeights(
    model::Network& net, const NamedTensors& exported,
    const std::function<void(const std::string&, torch::Tensor&, bool)>&
        visit) {
  torch::NoGradGuard no_grad;
  std::set<std::string> taken;
  for (size_t i = 0; i < net.blocks.size(); ++i) {
    model::Block& block = *net.blocks[i];
    block.eval();
    auto take = [&](const std::string& name, torch::Tensor& t,
                    bool parameter) -> absl::Status {
      const std::string full = absl::StrCat("blocks.", i, ".", name);
      auto it = exported.find(full);
      if (it == exported.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("export: no tensor \"", full, "\""));
      }
      if (it->second.sizes() != t.sizes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "export: \"", full, "\" has shape ", c10::str(it->second.sizes()),
            ", the network's is ", c10::str(t.sizes())));
      }
      t.copy_(it->second);
      taken.insert(full);
      if (visit) visit(full, t, parameter);
      return absl::OkStatus();
    };
    for (auto& p : block.named_parameters(true)) {
      if (absl::Status s = take(p.key(), p.value(), true); !s.ok()) return s;
    }
    for (auto& b : block.named_buffers(true)) {
      if (absl::Status s = take(b.key(), b.value(), false); !s.ok()) return s;
    }
  }
  // Strict, as torch's load_state_dict: a tensor the network lacks means
  // another network (a deeper one, say).
  for (const auto& [name, t] : exported) {
    if (name.rfind("blocks.", 0) == 0 && !taken.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "export: \"", name, "\" is not a tensor of the network (",
          net.blocks.size(), " blocks)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace petra::engine
