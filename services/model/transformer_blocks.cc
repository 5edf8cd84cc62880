#include "services/model/transformer_blocks.h"

#include <cmath>
#include <limits>

#include "services/catalog/architecture_catalog.h"
#include "services/model/layers.h"
#include "services/model/precision.h"

namespace petra::model {
namespace {

// ViT's initialisation: small normal weights, zero biases.
torch::nn::Linear MakeLinear(int64_t in, int64_t out) {
  torch::nn::Linear l(in, out);
  torch::NoGradGuard no_grad;
  l->weight.normal_(0.0, 0.02);
  l->bias.zero_();
  return l;
}

}  // namespace

AttentionImpl::AttentionImpl(int64_t dim, int64_t heads, bool causal)
    : heads_(heads), causal_(causal) {
  norm_ = register_module(
      "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  qkv_ = register_module("qkv", MakeLinear(dim, 3 * dim));
  proj_ = register_module("proj", MakeLinear(dim, dim));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), n = x.size(1), d = x.size(2);
  const int64_t dh = d / heads_;
  // [b, n, 3, heads, dh] -> [3, b, heads, n, dh]. The batch dimension as
  // -1, not b: a traced forward (the TorchScript export) must not freeze
  // the batch size it was traced with.
  torch::Tensor qkv = CountedLinear(qkv_, norm_->forward(x))
                          .reshape({-1, n, 3, heads_, dh})
                          .permute({2, 0, 3, 1, 4});
  torch::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) /
                         std::sqrt(static_cast<double>(dh));
  if (causal_) {
    const torch::Tensor later =
        torch::ones(
            {n, n},
            torch::TensorOptions().dtype(torch::kBool).device(x.device()))
            .triu(1);
    scores =
        scores.masked_fill(later, -std::numeric_limits<double>::infinity());
  }
  torch::Tensor attention = torch::softmax(scores, -1);
  // Q K^T and the weighted sum of V: 2 x (2 b heads n^2 dh).
  ScopedFlopCounter::Add(4 * b * heads_ * n * n * dh);
  // The LayerNorm, and the scaled scores' softmax.
  ScopedFlopCounter::AddElementwise(x.numel() + 2 * attention.numel());
  torch::Tensor out =
      torch::matmul(attention, v).transpose(1, 2).reshape({-1, n, d});
  return CountedLinear(proj_, out);
}

MlpImpl::MlpImpl(int64_t dim, int64_t hidden) {
  norm_ = register_module(
      "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  fc1_ = register_module("fc1", MakeLinear(dim, hidden));
  fc2_ = register_module("fc2", MakeLinear(hidden, dim));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  torch::Tensor hidden = CountedLinear(fc1_, norm_->forward(x));
  // The LayerNorm and the GELU.
  ScopedFlopCounter::AddElementwise(x.numel() + hidden.numel());
  return CountedLinear(fc2_, torch::gelu(hidden));
}

PatchEmbedBlock::PatchEmbedBlock(const TransformerOptions& o, bool two_streams)
    : options_(o), two_streams_(two_streams) {
  int64_t in = o.in_channels;
  int64_t kernel = o.patch_size;
  if (o.conv_stem) {
    torch::nn::ModuleList convs;
    for (int64_t width : catalog::ConvStemWidths(o.patch_size, o.embed_dim)) {
      ConvBnOptions c;
      c.in = in;
      c.out = width;
      c.kernel = 3;
      c.stride = 2;
      convs_.push_back(ConvBn(c));
      convs->push_back(convs_.back());
      in = width;
    }
    register_module("convs", convs);
    kernel = 1;
  }
  patch_ = register_module(
      "patch",
      torch::nn::Conv2d(
          torch::nn::Conv2dOptions(in, o.embed_dim, kernel).stride(kernel)));
  const int64_t side = o.image_side / o.patch_size;
  position_ =
      register_parameter(kPositionEmbeddingName,
                         torch::randn({1, side * side, o.embed_dim}) * 0.02);
}

TensorPair PatchEmbedBlock::Forward(const TensorPair& x) {
  torch::Tensor image = x.a;
  for (ConvBn& conv : convs_) image = conv->forward(image);
  torch::Tensor y = patch_->forward(image);  // [b, d, side, side]
  const int64_t kernel = patch_->options.kernel_size()->at(0);
  ScopedFlopCounter::Add(2 * image.size(1) * kernel * kernel * y.numel());
  torch::Tensor tokens = y.flatten(2).transpose(1, 2) + position_;
  if (!two_streams_) return {tokens, {}};
  return {tokens, tokens};
}

RevViTBlock::RevViTBlock(const TransformerOptions& o) {
  f_ = register_module("attention", Attention(o.embed_dim, o.heads, o.causal));
  g_ = register_module("mlp", Mlp(o.embed_dim, o.mlp_hidden));
}

// F and G join the streams in the streams' dtype (precision.h).
TensorPair RevViTBlock::Forward(const TensorPair& x) {
  torch::Tensor y1 = x.a + AsStream(f_->forward(x.b), x.a);
  return {y1, x.b + AsStream(g_->forward(y1), x.b)};
}

TensorPair RevViTBlock::Inverse(const TensorPair& y) {
  torch::Tensor x2 = y.b - AsStream(g_->forward(y.a), y.b);
  return {y.a - AsStream(f_->forward(x2), y.a), x2};
}

// With L(Y1, Y2): dL/dY1 in all is dY1 + G'(Y1)^T dY2 (= dL/dX1), and
// dL/dX2 = dY2 + F'(X2)^T dL/dY1. One recompute of G at Y1 gives X2, one of
// F at X2 gives X1 (the rebuild); their products with dY2 and dL/dY1 give
// the gradients (the second half).
class RevViTBlock::Pending : public PendingVjp {
 public:
  Pending(RevViTBlock& block, const TensorPair& y) : block_(block) {
    y1_ = y.a.detach().requires_grad_(true);
    g_ = AsStream(block.g_->forward(y1_), y.b);
    x2_ = (y.b - g_.detach()).detach().requires_grad_(true);
    f_ = AsStream(block.f_->forward(x2_), y.a);
    input_ = {(y.a - f_.detach()).detach(), x2_.detach()};
  }

  Rebuilt Finish(const TensorPair& dy) override {
    const std::vector<torch::Tensor> params = block_.parameters();
    std::vector<torch::Tensor> inputs = {y1_};
    inputs.insert(inputs.end(), params.begin(), params.end());
    std::vector<torch::Tensor> from_g =
        torch::autograd::grad({g_}, inputs, {dy.b}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    torch::Tensor dy1 = from_g[0].defined() ? dy.a + from_g[0] : dy.a;
    inputs[0] = x2_;
    std::vector<torch::Tensor> from_f =
        torch::autograd::grad({f_}, inputs, {dy1}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    Rebuilt out;
    out.input = input_;
    out.input_grad = {dy1, from_f[0].defined() ? dy.b + from_f[0] : dy.b};
    // Each parameter belongs to F or to G: one of the two products has it.
    for (size_t i = 0; i < params.size(); ++i) {
      out.parameter_grads.push_back(from_f[i + 1].defined() ? from_f[i + 1]
                                                            : from_g[i + 1]);
    }
    return out;
  }

 private:
  RevViTBlock& block_;
  torch::Tensor y1_, g_, x2_, f_;
};

std::unique_ptr<PendingVjp> RevViTBlock::Rebuild(const TensorPair& y) {
  return std::make_unique<Pending>(*this, y);
}

ViTBlock::ViTBlock(const TransformerOptions& o) {
  f_ = register_module("attention", Attention(o.embed_dim, o.heads, o.causal));
  g_ = register_module("mlp", Mlp(o.embed_dim, o.mlp_hidden));
}

TensorPair ViTBlock::Forward(const TensorPair& x) {
  torch::Tensor h = x.a + AsStream(f_->forward(x.a), x.a);
  return {h + AsStream(g_->forward(h), h), {}};
}

TokenHeadBlock::TokenHeadBlock(int64_t features, int64_t classes) {
  norm_ = register_module(
      "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({features})));
  fc_ = register_module("fc", MakeLinear(features, classes));
}

TensorPair TokenHeadBlock::Forward(const TensorPair& x) {
  torch::Tensor tokens = x.is_pair() ? torch::cat({x.a, x.b}, -1) : x.a;
  return {CountedLinear(fc_, norm_->forward(tokens).mean(1)), {}};
}

TokenEmbedBlock::TokenEmbedBlock(int64_t vocab, int64_t max_tokens, int64_t dim,
                                 bool two_streams)
    : two_streams_(two_streams) {
  embedding_ = register_module(
      kTokenEmbeddingName,
      torch::nn::Embedding(torch::nn::EmbeddingOptions(vocab, dim)));
  {
    torch::NoGradGuard no_grad;
    embedding_->weight.normal_(0.0, 0.02);
  }
  position_ = register_parameter(kPositionEmbeddingName,
                                 torch::randn({1, max_tokens, dim}) * 0.02);
}

TensorPair TokenEmbedBlock::Forward(const TensorPair& x) {
  const int64_t n = x.a.size(1);
  torch::Tensor tokens = embedding_->forward(x.a) + position_.narrow(1, 0, n);
  ScopedFlopCounter::AddElementwise(tokens.numel());
  if (!two_streams_) return {tokens, {}};
  return {tokens, tokens};
}

LmHeadBlock::LmHeadBlock(int64_t features, int64_t vocab, int64_t tied_dim) {
  norm_ = register_module(
      "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({features})));
  if (tied_dim > 0) {
    tied_weight_ = torch::randn({vocab, tied_dim}) * 0.02;
  } else {
    fc_ = register_module("fc", MakeLinear(features, vocab));
  }
}

TensorPair LmHeadBlock::Forward(const TensorPair& x) {
  torch::Tensor tokens = x.is_pair() ? torch::cat({x.a, x.b}, -1) : x.a;
  torch::Tensor h = norm_->forward(tokens);
  if (!tied()) return {CountedLinear(fc_, h), {}};
  const int64_t dim = tied_weight_.size(1);
  // The streams' halves of the normalised features through one embedding:
  // what an untied head would compute with its weight [E, E].
  if (h.size(-1) != dim) h = h.narrow(-1, 0, dim) + h.narrow(-1, dim, dim);
  torch::Tensor logits = torch::nn::functional::linear(h, tied_weight_);
  ScopedFlopCounter::Add(2 * dim * logits.numel());
  return {logits, {}};
}

}  // namespace petra::model
