#include "services/model/auxiliary_head.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

namespace petra::model {
namespace {

torch::Tensor Pool(const torch::Tensor& t) {
  if (t.dim() == 4) return t.mean({2, 3});
  if (t.dim() == 3) return t.mean(1);
  return t.flatten(1);
}

}  // namespace

torch::Tensor PooledFeatures(const TensorPair& y) {
  return y.b.defined() ? torch::cat({Pool(y.a), Pool(y.b)}, 1) : Pool(y.a);
}

AuxiliaryHead::AuxiliaryHead(int64_t features, int64_t classes, uint64_t seed,
                             torch::Device device) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(features));
  weight_ = ((torch::rand({classes, features}, gen) * 2 - 1) * bound)
                .to(device)
                .requires_grad_(true);
  bias_ = ((torch::rand({classes}, gen) * 2 - 1) * bound)
              .to(device)
              .requires_grad_(true);
}

torch::Tensor AuxiliaryHead::Logits(const TensorPair& y) const {
  return torch::nn::functional::linear(PooledFeatures(y), weight_, bias_);
}

int64_t AuxiliaryHead::parameter_bytes() const {
  if (!built()) return 0;
  return (weight_.numel() + bias_.numel()) * weight_.element_size();
}

}  // namespace petra::model
