#include "services/engine/stage_boundary.h"

#include "services/catalog/architecture_catalog.h"
#include "services/model/precision.h"

namespace petra::engine {
namespace {

torch::Tensor InLayout(const torch::Tensor& x, bool channels_last) {
  return channels_last && x.defined() && x.dim() == 4
             ? x.contiguous(at::MemoryFormat::ChannelsLast)
             : x;
}

}  // namespace

bool ChannelsLast(const petra::v1::JobSpec& resolved,
                  const torch::Device& device) {
  switch (resolved.training().memory_format()) {
    case petra::v1::TrainingSpec::MEMORY_FORMAT_CHANNELS_LAST:
      return true;
    case petra::v1::TrainingSpec::MEMORY_FORMAT_NCHW:
      return false;
    default:
      return device.is_cuda() &&
             !catalog::IsTransformer(resolved.model().architecture());
  }
}

std::vector<std::shared_ptr<model::Block>> PlaceBlocks(
    std::vector<std::shared_ptr<model::Block>> blocks,
    const torch::Device& device, bool channels_last) {
  for (const auto& b : blocks) {
    b->to(device);
    if (!channels_last) continue;
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : b->parameters()) {
      if (p.dim() == 4) p.set_data(InLayout(p.data(), true));
    }
  }
  return blocks;
}

model::TensorPair Arriving(const model::TensorPair& t,
                           const torch::Device& device, bool channels_last) {
  const model::TensorPair here = t.to(device);
  return {InLayout(model::ToFullPrecision(here.a), channels_last),
          InLayout(model::ToFullPrecision(here.b), channels_last)};
}

model::TensorPair Departing(model::TensorPair t, bool bf16_wire) {
  if (!bf16_wire) return t;
  for (torch::Tensor* x : {&t.a, &t.b}) {
    if (x->defined() && x->is_floating_point()) *x = x->to(torch::kBFloat16);
  }
  return t;
}

}  // namespace petra::engine
