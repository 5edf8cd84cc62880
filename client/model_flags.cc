#include "client/model_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/catalog/architecture_catalog.h"
#include "services/job/enum_names.h"
#include "services/job/job_flags.h"
#include "services/model/partition_plan.h"

namespace petra::client {

void AddModelFlags(base::FlagSet& flags, ModelFlags* m,
                   const std::string& arch_help) {
  m->spec.mutable_model()->set_variant(petra::v1::VARIANT_IMAGENET);
  // The dataset only matters for defaults; synthetic fits every variant.
  m->spec.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_SYNTHETIC);
  const auto* arch =
      google::protobuf::GetEnumDescriptor<petra::v1::Architecture>();
  const auto* variant =
      google::protobuf::GetEnumDescriptor<petra::v1::Variant>();
  flags.AddCustom("arch", absl::StrJoin(job::EnumShortNames(arch), "|"), "",
                  arch_help, [m, arch](const std::string& v) -> absl::Status {
                    absl::StatusOr<int> a =
                        job::ParseEnumShortName(arch, v, "value");
                    if (!a.ok()) return a.status();
                    m->spec.mutable_model()->set_architecture(
                        static_cast<petra::v1::Architecture>(*a));
                    return absl::OkStatus();
                  });
  flags.AddCustom("variant", absl::StrJoin(job::EnumShortNames(variant), "|"),
                  "imagenet", "input geometry and stem",
                  [m, variant](const std::string& v) -> absl::Status {
                    absl::StatusOr<int> a =
                        job::ParseEnumShortName(variant, v, "value");
                    if (!a.ok()) return a.status();
                    m->spec.mutable_model()->set_variant(
                        static_cast<petra::v1::Variant>(*a));
                    return absl::OkStatus();
                  });
  flags.AddDouble("width", &m->width, "channel width multiplier, in (0, 8]");
  job::AddTransformerFlags(
      flags, [m] { return m->spec.mutable_model()->mutable_transformer(); });
  flags.AddString("stages", &m->stages,
                  "N stages balanced by --partition-cost, or per-block");
  const auto* cost =
      google::protobuf::GetEnumDescriptor<petra::v1::PartitionSpec::Cost>();
  flags.AddCustom("partition-cost",
                  absl::StrJoin(job::EnumShortNames(cost), "|"), "estimated",
                  "with --stages N: the cost that balances the stages "
                  "(measured: times of each block on this machine)",
                  [m, cost](const std::string& v) -> absl::Status {
                    absl::StatusOr<int> c =
                        job::ParseEnumShortName(cost, v, "value");
                    if (!c.ok()) return c.status();
                    m->spec.mutable_partition()->set_cost(
                        static_cast<petra::v1::PartitionSpec::Cost>(*c));
                    return absl::OkStatus();
                  });
}

absl::StatusOr<petra::v1::JobSpec> ModelSpecFromFlags(const ModelFlags& m) {
  if (m.spec.model().architecture() == 0) {
    return absl::InvalidArgumentError("--arch is required");
  }
  petra::v1::JobSpec spec = m.spec;
  spec.mutable_model()->set_width(m.width);
  // A language model: text (for its defaults), no image geometry.
  if (catalog::IsLanguageModel(spec.model().architecture())) {
    spec.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_TEXT);
    spec.mutable_model()->clear_variant();
  }
  if (m.stages != "per-block") {
    uint32_t n = 0;
    if (!absl::SimpleAtoi(m.stages, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --stages: bad value \"", m.stages,
                       "\": expected a number or per-block"));
    }
    spec.mutable_partition()->set_stage_count(n);
  }
  return spec;
}

absl::StatusOr<PartitionedModel> BuildPartitionedModel(
    const petra::v1::JobSpec& resolved) {
  absl::StatusOr<model::NetworkBlueprint> net =
      model::DescribeNetwork(resolved.model());
  if (!net.ok()) return net.status();
  PartitionedModel out;
  out.blocks = model::SummarizeBlocks(*net);
  absl::StatusOr<std::vector<model::BlockRange>> ranges =
      model::PlanPartition(*net, resolved);
  if (!ranges.ok()) return ranges.status();
  out.stages = model::SummarizeStages(out.blocks, *ranges);
  out.input_shape = net->input_shape;
  for (const model::BlockSummary& b : out.blocks)
    out.parameters += b.parameters;
  return out;
}

}  // namespace petra::client
