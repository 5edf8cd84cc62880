#include "services/engine/stage_state.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace petra::engine {
namespace {

// Parameter -> its name.
std::map<const void*, std::string> ParameterNames(const StageBlocks& blocks,
                                                  int first_block) {
  std::map<const void*, std::string> names;
  const auto& bs = blocks.blocks();
  for (size_t i = 0; i < bs.size(); ++i) {
    for (const auto& p : bs[i]->named_parameters()) {
      names[p.value().unsafeGetTensorImpl()] =
          absl::StrCat("blocks.", first_block + i, ".", p.key());
    }
  }
  return names;
}

}  // namespace

NamedTensorList NamedStageState(const StageBlocks& blocks, int first_block,
                                const GradientAccumulator& optimizer,
                                bool with_optimizer) {
  NamedTensorList out;
  const auto& bs = blocks.blocks();
  for (size_t i = 0; i < bs.size(); ++i) {
    const std::string prefix = absl::StrCat("blocks.", first_block + i, ".");
    for (const auto& p : bs[i]->named_parameters()) {
      out.emplace_back(prefix + p.key(), p.value().detach());
    }
    for (const auto& b : bs[i]->named_buffers()) {
      out.emplace_back(prefix + b.key(), b.value().detach());
    }
  }
  if (!with_optimizer) return out;
  std::map<const void*, std::string> names =
      ParameterNames(blocks, first_block);
  for (const torch::Tensor& p : blocks.parameters()) {
    optimizer.AppendState(names[p.unsafeGetTensorImpl()], p, out);
  }
  return out;
}

absl::Status LoadNamedStageState(
    const std::map<std::string, torch::Tensor>& state, StageBlocks& blocks,
    int first_block, GradientAccumulator& optimizer) {
  torch::NoGradGuard no_grad;
  auto find = [&](const std::string& name,
                  const torch::Tensor& like) -> absl::StatusOr<torch::Tensor> {
    auto it = state.find(name);
    if (it == state.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: tensor \"", name, "\" is missing"));
    }
    if (it->second.sizes() != like.sizes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: tensor \"", name, "\" has shape ",
                       c10::str(it->second.sizes()), ", the model needs ",
                       c10::str(like.sizes())));
    }
    return it->second;
  };
  // Check everything before changing anything.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
  for (const auto& [name, t] :
       NamedStageState(blocks, first_block, optimizer, false)) {
    absl::StatusOr<torch::Tensor> src = find(name, t);
    if (!src.ok()) return src.status();
    copies.emplace_back(t, *src);
  }
  for (auto& [dst, src] : copies) dst.copy_(src);
  std::map<const void*, std::string> names =
      ParameterNames(blocks, first_block);
  for (const torch::Tensor& p : blocks.parameters()) {
    absl::Status loaded =
        optimizer.LoadState(state, names[p.unsafeGetTensorImpl()], p);
    if (!loaded.ok()) return loaded;
  }
  return absl::OkStatus();
}

}  // namespace petra::engine
