#include "client/estimated_profile.h"

#include "services/job/enum_names.h"

namespace petra::client {
namespace {

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// What a stage hands the next: `element` bytes a value (training.wire_dtype).
int64_t OutputBytes(const model::StageSummary& s, int64_t micro_batch,
                    int64_t element) {
  return Elements(s.output_shape) * (s.output_is_pair ? 2 : 1) * element *
         micro_batch;
}

}  // namespace

petra::v1::Profile EstimateProfile(const petra::v1::JobSpec& resolved,
                                   const PartitionedModel& model,
                                   int64_t micro_batch,
                                   double flops_per_second) {
  petra::v1::Profile p;
  p.set_architecture(job::EnumShortName(resolved.model().architecture()));
  p.set_variant(job::EnumShortName(resolved.model().variant()));
  p.set_width(resolved.model().width());
  p.set_micro_batch_size(static_cast<uint32_t>(micro_batch));
  p.set_source("estimated");
  const int64_t element = resolved.training().wire_dtype() ==
                                  petra::v1::TrainingSpec::WIRE_DTYPE_BF16
                              ? 2
                              : static_cast<int64_t>(sizeof(float));
  for (size_t j = 0; j < model.stages.size(); ++j) {
    const model::StageSummary& s = model.stages[j];
    petra::v1::StageProfile* out = p.add_stages();
    out->set_index(static_cast<uint32_t>(j));
    out->set_first_block(static_cast<uint32_t>(s.blocks.begin));
    out->set_end_block(static_cast<uint32_t>(s.blocks.end));
    out->set_reversible(s.reversible);
    out->set_parameters(static_cast<uint64_t>(s.parameters));
    const int64_t input_bytes =
        j == 0 ? Elements(model.input_shape) *
                     static_cast<int64_t>(sizeof(float)) * micro_batch
               : OutputBytes(model.stages[j - 1], micro_batch, element);
    out->set_input_bytes(static_cast<uint64_t>(input_bytes));
    out->set_output_bytes(
        static_cast<uint64_t>(OutputBytes(s, micro_batch, element)));
    const double forward = static_cast<double>(s.forward_flops) *
                           static_cast<double>(micro_batch) / flops_per_second;
    out->set_forward_seconds(forward);
    out->set_backward_seconds(3 * forward);
    out->set_backward_stored_seconds(2 * forward);
  }
  return p;
}

}  // namespace petra::client
