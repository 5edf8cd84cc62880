#include "services/model/network.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "services/catalog/architecture_catalog.h"
#include "services/model/coupling_block.h"
#include "services/model/seed_mix.h"
#include "services/model/transformer_blocks.h"

namespace petra::model {
namespace {

struct Depth {
  bool bottleneck;
  std::vector<int> blocks_per_layer;
};

Depth DepthOf(int architecture) {
  switch (architecture) {
    case petra::v1::ARCHITECTURE_REVNET18:
    case petra::v1::ARCHITECTURE_IREVNET18:
    case petra::v1::ARCHITECTURE_RESNET18:
      return {false, {2, 2, 2, 2}};
    case petra::v1::ARCHITECTURE_REVNET34:
    case petra::v1::ARCHITECTURE_RESNET34:
      return {false, {3, 4, 6, 3}};
    case petra::v1::ARCHITECTURE_REVNET101:
    case petra::v1::ARCHITECTURE_RESNET101:
      return {true, {3, 4, 23, 3}};
    default:  // 50-layer networks
      return {true, {3, 4, 6, 3}};
  }
}

// revvit and vit of a resolved spec: stem, depth blocks, head.
NetworkBlueprint DescribeTransformer(const petra::v1::ModelSpec& model,
                                     const std::vector<int64_t>& input_shape) {
  const petra::v1::TransformerSpec& t = model.transformer();
  const bool rev = model.architecture() == petra::v1::ARCHITECTURE_REVVIT;
  TransformerOptions o;
  o.in_channels = input_shape[0];
  o.image_side = input_shape[1];
  o.embed_dim = t.embed_dim();
  o.heads = t.heads();
  o.mlp_hidden =
      std::max<int64_t>(1, std::llround(t.mlp_ratio() * t.embed_dim()));
  o.patch_size = t.patch_size();
  o.conv_stem = t.stem() == petra::v1::TransformerSpec::STEM_CONV;
  NetworkBlueprint net;
  net.num_classes = model.num_classes();
  net.input_shape = input_shape;
  net.blocks.push_back([o, rev]() -> std::shared_ptr<Block> {
    return std::make_shared<PatchEmbedBlock>(o, rev);
  });
  for (uint32_t i = 0; i < t.depth(); ++i) {
    net.blocks.push_back([o, rev]() -> std::shared_ptr<Block> {
      if (rev) return std::make_shared<RevViTBlock>(o);
      return std::make_shared<ViTBlock>(o);
    });
  }
  const int64_t features = rev ? 2 * o.embed_dim : o.embed_dim;
  const int64_t classes = net.num_classes;
  net.blocks.push_back([features, classes]() -> std::shared_ptr<Block> {
    return std::make_shared<TokenHeadBlock>(features, classes);
  });
  return net;
}

// revlm and gpt of a resolved spec: token stem, depth causal blocks, LM
// head. One sample's input is seq_len tokens; the classes are the
// vocabulary.
NetworkBlueprint DescribeLanguageModel(const petra::v1::ModelSpec& model) {
  const petra::v1::TransformerSpec& t = model.transformer();
  const bool rev = model.architecture() == petra::v1::ARCHITECTURE_REVLM;
  TransformerOptions o;
  o.embed_dim = t.embed_dim();
  o.heads = t.heads();
  o.mlp_hidden =
      std::max<int64_t>(1, std::llround(t.mlp_ratio() * t.embed_dim()));
  o.causal = true;
  NetworkBlueprint net;
  net.num_classes = t.vocab();
  net.input_shape = {static_cast<int64_t>(t.seq_len())};
  net.input_dtype = torch::kInt64;
  const int64_t vocab = t.vocab(), seq_len = t.seq_len();
  net.blocks.push_back([o, rev, vocab, seq_len]() -> std::shared_ptr<Block> {
    return std::make_shared<TokenEmbedBlock>(vocab, seq_len, o.embed_dim, rev);
  });
  for (uint32_t i = 0; i < t.depth(); ++i) {
    net.blocks.push_back([o, rev]() -> std::shared_ptr<Block> {
      if (rev) return std::make_shared<RevViTBlock>(o);
      return std::make_shared<ViTBlock>(o);
    });
  }
  const int64_t features = rev ? 2 * o.embed_dim : o.embed_dim;
  const int64_t tied_dim = t.tie_embeddings() ? o.embed_dim : 0;
  net.blocks.push_back([features, vocab, tied_dim]() -> std::shared_ptr<Block> {
    return std::make_shared<LmHeadBlock>(features, vocab, tied_dim);
  });
  net.tied_ends = t.tie_embeddings();
  return net;
}

}  // namespace

absl::StatusOr<NetworkBlueprint> DescribeNetwork(
    const petra::v1::ModelSpec& model) {
  absl::StatusOr<catalog::ArchitectureInfo> info =
      catalog::GetArchitectureInfo(model);
  if (!info.ok()) return info.status();
  if (catalog::IsLanguageModel(model.architecture())) {
    const petra::v1::TransformerSpec& t = model.transformer();
    if (t.embed_dim() == 0 || t.heads() == 0 ||
        t.embed_dim() % t.heads() != 0 || t.depth() == 0 || t.seq_len() == 0 ||
        t.vocab() < 2 || !std::isfinite(t.mlp_ratio()) ||
        !(t.mlp_ratio() > 0)) {
      return absl::InvalidArgumentError(
          "model.transformer: a language model's sizes must be resolved and "
          "valid before building");
    }
    return DescribeLanguageModel(model);
  }
  if (!model.has_num_classes()) {
    // An image folder's job before its folder was counted (FillFromData).
    return absl::InvalidArgumentError(
        "model.num_classes is not set: an image folder's class count is read "
        "from its train/ folder where the data is (`petra train`, the "
        "coordinator); here, give --num-classes");
  }
  if (!(model.width() > 0) || model.num_classes() < 2) {
    return absl::InvalidArgumentError(
        "model: width and num_classes must be resolved before building");
  }
  if (catalog::IsTransformer(model.architecture())) {
    const petra::v1::TransformerSpec& t = model.transformer();
    const std::vector<int64_t> shape = catalog::InputShape(model.variant());
    if (t.embed_dim() == 0 || t.heads() == 0 ||
        t.embed_dim() % t.heads() != 0 || t.depth() == 0 ||
        t.patch_size() == 0 || shape[1] % t.patch_size() != 0 ||
        t.stem() == petra::v1::TransformerSpec::STEM_UNSPECIFIED ||
        (t.stem() == petra::v1::TransformerSpec::STEM_CONV &&
         !catalog::ConvStemFits(shape[1], t.patch_size())) ||
        !std::isfinite(t.mlp_ratio()) || !(t.mlp_ratio() > 0)) {
      return absl::InvalidArgumentError(
          "model.transformer: sizes must be resolved and valid before "
          "building");
    }
    return DescribeTransformer(model, shape);
  }
  const Depth depth = DepthOf(model.architecture());
  const bool rev = info->reversible;
  // i-RevNet: shape changes are invertible squeezes inside the coupling.
  const bool invertible_downsampling =
      model.architecture() == petra::v1::ARCHITECTURE_IREVNET18;
  const bool imagenet = model.variant() == petra::v1::VARIANT_IMAGENET;
  auto scaled = [&](int64_t c) {
    return std::max<int64_t>(1, std::llround(c * model.width()));
  };

  NetworkBlueprint net;
  net.num_classes = model.num_classes();
  net.input_shape = catalog::InputShape(model.variant());

  // A RevNet carries two streams, each as wide as the matching ResNet.
  const int64_t stem_width = scaled(64);
  const StemOptions stem{net.input_shape[0], rev ? 2 * stem_width : stem_width,
                         imagenet, rev};
  net.blocks.push_back([stem]() -> std::shared_ptr<Block> {
    return std::make_shared<StemBlock>(stem);
  });

  int64_t channels = stem_width;  // per stream
  const int64_t base_widths[] = {64, 128, 256, 512};
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t inner = scaled(base_widths[layer]);
    const int64_t out = depth.bottleneck ? 4 * inner : inner;
    for (int i = 0; i < depth.blocks_per_layer[layer]; ++i) {
      ResidualOptions r;
      r.bottleneck = depth.bottleneck;
      r.in = channels;
      r.width = inner;
      r.out = out;
      r.stride = (i == 0 && layer > 0) ? 2 : 1;
      if (invertible_downsampling) {
        // A squeeze by the stride keeps every value: 4x the channels.
        r.out = channels * r.stride * r.stride;
        net.blocks.push_back([r]() -> std::shared_ptr<Block> {
          return std::make_shared<CouplingBlock>(r);
        });
        channels = r.out;
        continue;
      }
      const bool changes_shape = r.stride != 1 || r.in != r.out;
      const bool bottleneck = depth.bottleneck;
      net.blocks.push_back(
          [r, rev, changes_shape, bottleneck]() -> std::shared_ptr<Block> {
            if (!rev) return std::make_shared<ResidualBlock>(r);
            if (changes_shape) {
              return std::make_shared<RevDownsampleBlock>(r, bottleneck);
            }
            return std::make_shared<CouplingBlock>(r);
          });
      channels = out;
    }
  }
  const int64_t features = rev ? 2 * channels : channels;
  const int64_t classes = net.num_classes;
  net.blocks.push_back([features, classes]() -> std::shared_ptr<Block> {
    return std::make_shared<HeadBlock>(features, classes);
  });

  if (static_cast<int>(net.blocks.size()) != info->per_block_stages) {
    return absl::InternalError(
        absl::StrCat(info->display_name, " built ", net.blocks.size(),
                     " blocks, expected ", info->per_block_stages));
  }
  return net;
}

torch::Tensor ExampleInput(const NetworkBlueprint& blueprint, int64_t batch) {
  std::vector<int64_t> shape = {batch};
  shape.insert(shape.end(), blueprint.input_shape.begin(),
               blueprint.input_shape.end());
  return torch::zeros(shape, blueprint.input_dtype);
}

uint64_t BlockSeed(uint64_t seed, int index) {
  // SplitMix64's mix of the pair: neighbouring seeds and blocks far apart.
  return Mix64(seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(index) +
               0x632be59bd9b4e019ULL);
}

std::vector<std::shared_ptr<Block>> BuildBlocks(
    const NetworkBlueprint& blueprint, int begin, int end, uint64_t seed) {
  // torch::nn's initialisers draw from the global generator: one build at a
  // time, so that a seed gives its block whatever other threads build.
  static std::mutex* const mu = new std::mutex;
  std::lock_guard<std::mutex> lock(*mu);
  std::vector<std::shared_ptr<Block>> out;
  for (int i = std::max(0, begin); i < std::min(end, blueprint.size()); ++i) {
    torch::manual_seed(BlockSeed(seed, i));
    out.push_back(blueprint.blocks[i]());
  }
  if (blueprint.tied_ends && begin <= 0 && end >= blueprint.size()) {
    static_cast<LmHeadBlock&>(*out.back())
        .Tie(static_cast<const TokenEmbedBlock&>(*out.front()).token_weight());
  }
  return out;
}

absl::Status CheckTiedEnds(const NetworkBlueprint& blueprint, int begin,
                           int end) {
  if (!blueprint.tied_ends) return absl::OkStatus();
  const bool first = begin <= 0, last = end >= blueprint.size();
  if (first == last) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "blocks [", begin, ", ", end,
      ") hold one end of a network whose token embedding and LM head share "
      "their weight (tie_embeddings): both ends must be on one stage"));
}

absl::StatusOr<Network> BuildNetwork(const petra::v1::ModelSpec& model,
                                     uint64_t seed) {
  absl::StatusOr<NetworkBlueprint> blueprint = DescribeNetwork(model);
  if (!blueprint.ok()) return blueprint.status();
  Network net;
  net.blocks = BuildBlocks(*blueprint, 0, blueprint->size(), seed);
  net.input_shape = blueprint->input_shape;
  net.num_classes = blueprint->num_classes;
  return net;
}

}  // namespace petra::model
