// `petra model-info`: parameter count and stage list of a network.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/command_table.h"
#include "client/model_flags.h"
#include "services/base/flag_set.h"
#include "services/catalog/architecture_catalog.h"
#include "services/job/enum_names.h"
#include "services/job/job_spec_validation.h"
#include "services/model/network_summary.h"

namespace petra::client {
namespace {

std::string ShapeText(const model::StageSummary& s) {
  std::string dims = absl::StrJoin(s.output_shape, "x");
  return s.output_is_pair ? absl::StrCat("2 x ", dims) : dims;
}

std::string Json(const std::string& arch, const std::string& variant,
                 const petra::v1::ModelSpec& m, int64_t params,
                 const std::vector<model::StageSummary>& stages,
                 const std::vector<model::BlockSummary>& blocks) {
  std::string out = absl::StrFormat(
      "{\n  \"architecture\": \"%s\",\n  \"variant\": \"%s\",\n  \"width\": "
      "%g,\n",
      arch, variant, m.width());
  if (catalog::IsLanguageModel(m.architecture())) {
    const petra::v1::TransformerSpec& t = m.transformer();
    absl::StrAppendFormat(
        &out,
        "  \"transformer\": {\"embed_dim\": %d, \"depth\": %d, \"heads\": "
        "%d, \"mlp_ratio\": %g, \"seq_len\": %d, \"vocab\": %d},\n",
        t.embed_dim(), t.depth(), t.heads(), t.mlp_ratio(), t.seq_len(),
        t.vocab());
  } else if (catalog::IsTransformer(m.architecture())) {
    const petra::v1::TransformerSpec& t = m.transformer();
    absl::StrAppendFormat(
        &out,
        "  \"transformer\": {\"embed_dim\": %d, \"depth\": %d, \"heads\": "
        "%d, \"mlp_ratio\": %g, \"patch_size\": %d, \"stem\": \"%s\"},\n",
        t.embed_dim(), t.depth(), t.heads(), t.mlp_ratio(), t.patch_size(),
        t.stem() == petra::v1::TransformerSpec::STEM_PATCH ? "patch" : "conv");
  }
  absl::StrAppendFormat(&out, "  \"params\": %d,\n  \"stages\": [", params);
  for (size_t i = 0; i < stages.size(); ++i) {
    const model::StageSummary& s = stages[i];
    std::vector<std::string> kinds;
    for (int b = s.blocks.begin; b < s.blocks.end; ++b) {
      kinds.push_back(absl::StrCat("\"", blocks[b].kind, "\""));
    }
    absl::StrAppendFormat(
        &out,
        "%s\n    {\"index\": %d, \"blocks\": [%d, %d], \"kinds\": [%s], "
        "\"reversible\": %s, \"params\": %d, \"output_shape\": [%s], "
        "\"output_is_pair\": %s, \"forward_flops\": %d, "
        "\"forward_elementwise\": %d, \"estimated_cost\": %.0f}",
        i == 0 ? "" : ",", s.index, s.blocks.begin, s.blocks.end,
        absl::StrJoin(kinds, ", "), s.reversible ? "true" : "false",
        s.parameters, absl::StrJoin(s.output_shape, ", "),
        s.output_is_pair ? "true" : "false", s.forward_flops,
        s.forward_elementwise, s.estimated_cost);
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

}  // namespace

int RunModelInfo(const std::string& program,
                 const std::vector<std::string>& args) {
  ModelFlags model_flags;
  bool json = false;
  base::FlagSet flags(
      absl::StrCat(program, " model-info --arch ARCH [flags]"),
      "Prints a network's parameter count and its stages: index, blocks,\n"
      "whether the stage is reversible, parameters, output shape per sample\n"
      "(\"2 x CxHxW\" for a reversible pair) and estimated forward FLOPs per\n"
      "sample.");
  AddModelFlags(flags, &model_flags);
  flags.AddBool("json", &json, "print JSON: {params, stages: [...]}");
  const std::string command = program + " model-info";
  if (int rc = base::ParseCommandOrExit(flags, command, args); rc >= 0)
    return rc;
  absl::StatusOr<petra::v1::JobSpec> spec = ModelSpecFromFlags(model_flags);
  if (!spec.ok()) {
    std::cerr << command << ": " << spec.status().message() << "\nRun '"
              << command << " --help' for the list of flags.\n";
    return 2;
  }
  absl::StatusOr<petra::v1::JobSpec> resolved = job::ResolveJobSpec(*spec);
  if (!resolved.ok()) {
    std::cerr << command << ": " << resolved.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<PartitionedModel> model = BuildPartitionedModel(*resolved);
  if (!model.ok()) {
    std::cerr << command << ": " << model.status().message() << "\n";
    return 1;
  }
  const std::vector<model::BlockSummary>& blocks = model->blocks;
  const std::vector<model::StageSummary>& summary = model->stages;
  const int64_t params = model->parameters;
  const std::string arch_name =
      job::EnumShortName(resolved->model().architecture());
  const std::string variant_name =
      job::EnumShortName(resolved->model().variant());
  if (json) {
    std::cout << Json(arch_name, variant_name, resolved->model(), params,
                      summary, blocks);
    return 0;
  }
  auto info = catalog::GetArchitectureInfo(resolved->model());
  // A language model has no image geometry to name.
  const std::string geometry =
      resolved->model().variant() == petra::v1::VARIANT_UNSPECIFIED
          ? ""
          : variant_name + ", ";
  std::cout << absl::StrFormat(
      "%s (%s%s): %d parameters (%.2fM), %d stages\n\n", info->display_name,
      geometry, catalog::DescribeSize(resolved->model()), params, params / 1e6,
      static_cast<int>(summary.size()));
  std::cout << absl::StrFormat("%-6s %-8s %-11s %-10s %12s  %-18s %14s\n",
                               "stage", "blocks", "kind", "reversible",
                               "params", "output", "fwd MFLOP/smp");
  for (const model::StageSummary& s : summary) {
    std::string kind = blocks[s.blocks.begin].kind;
    if (s.blocks.end - s.blocks.begin > 1) kind += "+";
    std::cout << absl::StrFormat(
        "%-6d %-8s %-11s %-10s %12d  %-18s %14.1f\n", s.index,
        absl::StrCat(s.blocks.begin, "-", s.blocks.end - 1), kind,
        s.reversible ? "yes" : "no", s.parameters, ShapeText(s),
        s.forward_flops / 1e6);
  }
  return 0;
}

}  // namespace petra::client
