#include "services/model/layers.h"

namespace petra::model {
namespace {
thread_local ScopedFlopCounter* active_counter = nullptr;
}  // namespace

ScopedFlopCounter::ScopedFlopCounter() : previous_(active_counter) {
  active_counter = this;
}
ScopedFlopCounter::~ScopedFlopCounter() { active_counter = previous_; }

void ScopedFlopCounter::Add(int64_t flops) {
  if (active_counter != nullptr) active_counter->flops_ += flops;
}

void ScopedFlopCounter::AddElementwise(int64_t elements) {
  if (active_counter != nullptr) active_counter->elementwise_ += elements;
}

ConvBnImpl::ConvBnImpl(const ConvBnOptions& options) : options_(options) {
  conv_ = register_module(
      "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(
                                    options.in, options.out, options.kernel)
                                    .stride(options.stride)
                                    .padding(options.kernel / 2)
                                    .bias(false)));
  // He initialisation (fan-out, ReLU), as torchvision's ResNets.
  torch::nn::init::kaiming_normal_(conv_->weight, 0.0, torch::kFanOut,
                                   torch::kReLU);
  bn_ = register_module("bn", BatchNorm2d(options.out));
}

torch::Tensor ConvBnImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = conv_->forward(x);
  ScopedFlopCounter::Add(2 * options_.in * options_.kernel * options_.kernel *
                         y.numel());
  y = bn_->forward(y);
  ScopedFlopCounter::AddElementwise((options_.relu ? 2 : 1) * y.numel());
  return options_.relu ? torch::relu(y) : y;
}

ResidualFunctionImpl::ResidualFunctionImpl(const ResidualOptions& o) {
  if (o.bottleneck) {
    body_->push_back(ConvBn(ConvBnOptions{o.in, o.width, 1, 1, true}));
    body_->push_back(
        ConvBn(ConvBnOptions{o.width, o.width, 3, o.stride, true}));
    body_->push_back(ConvBn(ConvBnOptions{o.width, o.out, 1, 1, o.final_relu}));
  } else {
    body_->push_back(ConvBn(ConvBnOptions{o.in, o.width, 3, o.stride, true}));
    body_->push_back(ConvBn(ConvBnOptions{o.width, o.out, 3, 1, o.final_relu}));
  }
  register_module("body", body_);
}

torch::Tensor ResidualFunctionImpl::forward(const torch::Tensor& x) {
  return body_->forward(x);
}

torch::Tensor CountedLinear(torch::nn::Linear& linear, const torch::Tensor& x) {
  torch::Tensor y = linear->forward(x);
  ScopedFlopCounter::Add(2 * linear->options.in_features() * y.numel());
  return y;
}

}  // namespace petra::model
