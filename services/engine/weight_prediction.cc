#include "services/engine/weight_prediction.h"

namespace petra::engine {

MovedWeights MovedWeights::Predicted(const GradientAccumulator& optimizer,
                                     double steps) {
  MovedWeights moved;
  for (const torch::Tensor& p : optimizer.parameters()) {
    moved.Move(p, optimizer.PredictedChange(p, steps));
  }
  return moved;
}

MovedWeights MovedWeights::AtTheForward(const GradientAccumulator& optimizer) {
  MovedWeights moved;
  for (const torch::Tensor& p : optimizer.parameters()) {
    moved.Move(p, optimizer.WeightDrift(p, -optimizer.delay()));
  }
  return moved;
}

void MovedWeights::Move(const torch::Tensor& param,
                        const torch::Tensor& change) {
  if (!change.defined()) return;
  torch::NoGradGuard no_grad;
  saved_.push_back(param.clone());
  params_.push_back(param);
  params_.back().add_(change);
}

MovedWeights::~MovedWeights() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(saved_[i]);
}

}  // namespace petra::engine
