#include "services/model/blocks.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/model/reversible_block.h"

namespace petra::model {

bool TakesWeightDecay(const std::string& name, const torch::Tensor& param) {
  const bool position =
      name == kPositionEmbeddingName ||
      absl::EndsWith(name, absl::StrCat(".", kPositionEmbeddingName));
  // A token embedding's rows are looked up, not multiplied: decay would
  // shrink every rare token's row at each step (GPT-2/3, nanoGPT).
  const bool token =
      absl::StartsWith(name, absl::StrCat(kTokenEmbeddingName, ".")) ||
      absl::StrContains(name, absl::StrCat(".", kTokenEmbeddingName, "."));
  return param.dim() > 1 && !position && !token;
}

std::vector<bool> Block::weight_decay_mask() const {
  std::vector<bool> mask;
  for (const auto& p : named_parameters()) {
    mask.push_back(TakesWeightDecay(p.key(), p.value()));
  }
  return mask;
}

bool Block::reversible() const {
  return dynamic_cast<const ReversibleBlock*>(this) != nullptr;
}

StemBlock::StemBlock(const StemOptions& o) : options_(o) {
  conv_ = register_module(
      "conv",
      ConvBn(ConvBnOptions{o.in_channels, o.out_channels, o.imagenet ? 7 : 3,
                           o.imagenet ? 2 : 1, true}));
}

TensorPair StemBlock::Forward(const TensorPair& x) {
  torch::Tensor y = conv_->forward(x.a);
  if (options_.imagenet) y = torch::max_pool2d(y, 3, 2, 1);
  if (!options_.split) return {y, {}};
  std::vector<torch::Tensor> halves = y.chunk(2, 1);
  return {halves[0], halves[1]};
}

RevDownsampleBlock::RevDownsampleBlock(const ResidualOptions& r,
                                       bool separate_projections) {
  residual_ = register_module("residual", ResidualFunction(r));
  project_b_ = register_module(
      "project_b", ConvBn(ConvBnOptions{r.in, r.out, 1, r.stride, false}));
  if (separate_projections) {
    project_a_ = register_module(
        "project_a", ConvBn(ConvBnOptions{r.in, r.out, 1, r.stride, false}));
  }
}

TensorPair RevDownsampleBlock::Forward(const TensorPair& x) {
  ConvBn& pa = project_a_ ? project_a_ : project_b_;
  return {residual_->forward(x.a) + project_b_->forward(x.b), pa->forward(x.a)};
}

ResidualBlock::ResidualBlock(const ResidualOptions& r) {
  ResidualOptions body = r;
  body.final_relu = false;
  residual_ = register_module("residual", ResidualFunction(body));
  if (r.stride != 1 || r.in != r.out) {
    shortcut_ = register_module(
        "shortcut", ConvBn(ConvBnOptions{r.in, r.out, 1, r.stride, false}));
  }
}

TensorPair ResidualBlock::Forward(const TensorPair& x) {
  torch::Tensor skip = shortcut_ ? shortcut_->forward(x.a) : x.a;
  return {torch::relu(residual_->forward(x.a) + skip), {}};
}

HeadBlock::HeadBlock(int64_t in_features, int64_t classes) {
  fc_ = register_module("fc", torch::nn::Linear(in_features, classes));
}

TensorPair HeadBlock::Forward(const TensorPair& x) {
  torch::Tensor features = x.is_pair() ? torch::cat({x.a, x.b}, 1) : x.a;
  features = torch::adaptive_avg_pool2d(features, {1, 1}).flatten(1);
  return {CountedLinear(fc_, features), {}};
}

}  // namespace petra::model
