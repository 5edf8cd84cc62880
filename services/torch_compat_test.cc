#include "services/torch_compat.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>
#include <unordered_map>

namespace petra {
namespace {

TEST(TorchCompat, OptimizerStateKeyFindsTheStateTorchsOwnStepMade) {
  torch::Tensor p = torch::ones({3}, torch::requires_grad());
  torch::Tensor other = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD sgd({p, other},
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  p.mutable_grad() = torch::ones({3});
  sgd.step();  // `other` has no gradient: no state of its own
  EXPECT_EQ(sgd.state().count(OptimizerStateKey(sgd, p)), 1u);
  EXPECT_EQ(sgd.state().count(OptimizerStateKey(sgd, other)), 0u);
}

// The two shapes of Optimizer::state() (torch 1.13: string keys; torch 2:
// the TensorImpl's address), whichever this libtorch has.
template <typename Key>
struct KeyedBy {
  const std::unordered_map<Key, int>& state() const { return map; }
  std::unordered_map<Key, int> map;
};

TEST(TorchCompat, OptimizerStateKeyTakesTheKeyTypeOfTheStateMap) {
  torch::Tensor p = torch::zeros({1});
  std::ostringstream printed;
  printed << p.unsafeGetTensorImpl();
  EXPECT_EQ(OptimizerStateKey(KeyedBy<std::string>{}, p), printed.str());
  EXPECT_EQ(OptimizerStateKey(KeyedBy<void*>{}, p),
            static_cast<void*>(p.unsafeGetTensorImpl()));
}

}  // namespace
}  // namespace petra
