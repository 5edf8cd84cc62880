// Weight prediction for a delayed stage (training.predict_weights; SpecTrain,
// Chen et al. 2018): for the length of a forward, the stage's parameters
// are moved to where the optimizer is predicted to take them by the time
// that micro-batch's gradient comes back, and put back bit for bit after.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "services/engine/gradient_accumulator.h"

namespace petra::engine {

class PredictedWeights {
 public:
  // Moves every parameter of `optimizer` that has a momentum buffer by its
  // PredictedChange over `steps` optimizer steps.
  PredictedWeights(const GradientAccumulator& optimizer, double steps);
  // Puts the parameters back as they were.
  ~PredictedWeights();
  PredictedWeights(const PredictedWeights&) = delete;
  PredictedWeights& operator=(const PredictedWeights&) = delete;

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> saved_;
};

}  // namespace petra::engine
