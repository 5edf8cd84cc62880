#include "services/engine/torchscript_export.h"

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "services/catalog/architecture_catalog.h"
#include "services/engine/export_input.h"
#include "services/engine/export_weights.h"
#include "services/model/batch_norm.h"
#include "services/model/network.h"

namespace petra::engine {
namespace {

// The module tree of the export's names: "blocks.3.conv.bn.weight" is
// attribute "weight" of submodule blocks -> 3 -> conv -> bn. Each level is
// a jit::Module of its own type (names need only be unique per parent).
class ModuleTree {
 public:
  ModuleTree() : root_(c10::QualifiedName("__torch__.petra.Network")) {}

  torch::jit::Module& root() { return root_; }

  void Add(const std::string& name, const torch::Tensor& t, bool parameter) {
    std::vector<std::string> parts = absl::StrSplit(name, '.');
    const std::string leaf = parts.back();
    parts.pop_back();
    torch::jit::Module* m = &root_;
    std::string path;
    for (const std::string& part : parts) {
      path = path.empty() ? part : absl::StrCat(path, ".", part);
      auto it = children_.find(path);
      if (it == children_.end()) {
        // A class per path: "petra.blocks_3_conv", valid and unique.
        std::string type = absl::StrCat("__torch__.petra.m_", path);
        std::replace(type.begin() + 16, type.end(), '.', '_');
        auto child =
            std::make_unique<torch::jit::Module>(c10::QualifiedName(type));
        it = children_.emplace(path, std::move(child)).first;
        order_.push_back({m, part, it->second.get()});
      }
      m = it->second.get();
    }
    if (parameter) {
      m->register_parameter(leaf, t, false);
    } else {
      m->register_buffer(leaf, t);
    }
  }

  // Registers every child with its parent, deepest first: a jit::Module is
  // registered by value (its object), so children must be complete first.
  void Link() {
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      it->parent->register_module(it->name, *it->child);
    }
  }

 private:
  struct Edge {
    torch::jit::Module* parent;
    std::string name;
    torch::jit::Module* child;
  };
  torch::jit::Module root_;
  std::map<std::string, std::unique_ptr<torch::jit::Module>> children_;
  std::vector<Edge> order_;
};

}  // namespace

absl::StatusOr<std::string> EncodeTorchScript(
    const petra::v1::JobSpec& resolved, const NamedTensors& exported) {
  // Every block, as the file holds the whole network; its weights are the
  // exported ones, loaded below.
  absl::StatusOr<model::Network> net =
      model::BuildNetwork(resolved.model(), resolved.seed());
  if (!net.ok()) return net.status();
  const bool tokens = catalog::IsLanguageModel(resolved.model().architecture());
  // A language model's input is {tokens}: ids, nothing to normalise.
  const int64_t channels = tokens ? 0 : net->input_shape[0];
  absl::StatusOr<petra::v1::Preprocessing> input =
      PreprocessingFromTensors(exported);
  if (!input.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("export: ", input.status().message()));
  }
  const std::vector<int64_t> input_shape(input->input_shape().begin(),
                                         input->input_shape().end());
  if (input->mean_size() != channels || input_shape != net->input_shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("export: its input.* tensors are for an input of shape [",
                     absl::StrJoin(input_shape, ", "), "], the network takes [",
                     absl::StrJoin(net->input_shape, ", "), "]"));
  }
  torch::NoGradGuard no_grad;
  ModuleTree tree;
  // The network's own tensors take the export's values; the module holds
  // those very tensors, so tracing maps each to a module attribute.
  if (absl::Status s = LoadExportedWeights(
          *net, exported,
          [&tree](const std::string& name, torch::Tensor& t, bool parameter) {
            tree.Add(name, t, parameter);
          });
      !s.ok()) {
    return s;
  }
  // The input tensors under the export's names (the module's state_dict is
  // the export's); forward reads mean and std as [1, C, 1, 1].
  torch::Tensor mean, std;
  for (auto& [name, t] : InputTensors(*input)) {
    if (name == "input.mean") mean = t;
    if (name == "input.std") std = t;
    tree.Add(name, t, false);
  }
  tree.Link();
  torch::jit::Module& module = tree.root();
  c10::List<std::string> class_names;
  for (const std::string& n : input->class_names()) class_names.push_back(n);
  module.register_attribute("class_names",
                            c10::ListType::create(c10::StringType::get()),
                            class_names);

  std::vector<int64_t> shape = {2};
  shape.insert(shape.end(), net->input_shape.begin(), net->input_shape.end());
  // Token ids trace the same graph whatever their values; images are drawn
  // so that no branch sees a degenerate input.
  const torch::Tensor example =
      tokens ? torch::zeros(shape, torch::kInt64) : torch::rand(shape);
  // Evaluation as StageWorker::Evaluate runs it: BatchNorm on running
  // statistics (our BatchNorm reads a thread-local mode, not eval()).
  model::ScopedBnMode running(model::BnMode::kRunningStats);
  auto forward = [&](torch::jit::Stack in) -> torch::jit::Stack {
    torch::Tensor x = in[0].toTensor();
    if (!tokens) {
      x = (x - mean.view({1, channels, 1, 1})) / std.view({1, channels, 1, 1});
    }
    model::TensorPair pair{x, torch::Tensor()};
    for (auto& block : net->blocks) pair = block->Forward(pair);
    return {pair.a};
  };
  try {
    auto traced = torch::jit::tracer::trace(
        {example}, forward, [](const torch::autograd::Variable&) { return ""; },
        /*strict=*/true, /*force_outplace=*/false, &module,
        {tokens ? "tokens" : "images"});
    std::shared_ptr<torch::jit::Graph> graph = traced.first->graph;
    auto fn = module._ivalue()->compilation_unit()->create_function(
        c10::QualifiedName(*module.type()->name(), "forward"), graph);
    module.type()->addMethod(fn);
    std::ostringstream out;
    module.save(out);
    return out.str();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("tracing the network failed: ",
                                            e.what_without_backtrace()));
  }
}

}  // namespace petra::engine
