#include "services/engine/weight_prediction.h"

namespace petra::engine {

PredictedWeights::PredictedWeights(const GradientAccumulator& optimizer,
                                   double steps) {
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : optimizer.parameters()) {
    torch::Tensor change = optimizer.PredictedChange(p, steps);
    if (!change.defined()) continue;
    saved_.push_back(p.clone());
    params_.push_back(p);
    params_.back().add_(change);
  }
}

PredictedWeights::~PredictedWeights() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(saved_[i]);
}

}  // namespace petra::engine
