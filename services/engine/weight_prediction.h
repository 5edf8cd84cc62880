// Weights moved for the length of one forward or backward, and put back bit
// for bit after: weight prediction for a delayed stage's forward
// (training.predict_weights; SpecTrain, Chen et al. 2018), to where the
// optimizer is predicted to take them by the time that micro-batch's
// gradient comes back; and PipeMare's discrepancy correction for its
// backward (training.discrepancy_correction), back to where they are
// estimated to have been at its forward.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "services/engine/gradient_accumulator.h"

namespace petra::engine {

class MovedWeights {
 public:
  // Forward: every parameter of `optimizer` that has optimizer state moves
  // by its PredictedChange over `steps` optimizer steps.
  static MovedWeights Predicted(const GradientAccumulator& optimizer,
                                double steps);
  // Backward: every parameter with a drift moves back by its WeightDrift
  // over the optimizer's delay.
  static MovedWeights AtTheForward(const GradientAccumulator& optimizer);
  // Puts the parameters back as they were.
  ~MovedWeights();
  MovedWeights(MovedWeights&&) = default;
  MovedWeights(const MovedWeights&) = delete;
  MovedWeights& operator=(const MovedWeights&) = delete;

 private:
  MovedWeights() = default;
  void Move(const torch::Tensor& param, const torch::Tensor& change);

  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> saved_;
};

}  // namespace petra::engine
