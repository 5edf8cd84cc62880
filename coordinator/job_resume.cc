#include "coordinator/job_resume.h"

#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace petra::coordinator {
namespace {

using google::protobuf::util::MessageDifferencer;

// Clears what a resumed job may change, so the rest can be compared whole.
petra::v1::JobSpec WithoutFreeFields(petra::v1::JobSpec s) {
  s.clear_name();
  s.mutable_training()->clear_epochs();
  s.mutable_training()->clear_max_steps();
  s.mutable_training()->clear_max_in_flight();
  s.mutable_training()->clear_grad_diagnostics_every();
  s.clear_evaluation();
  s.clear_checkpoint();
  s.clear_devices();
  s.clear_priority();
  return s;
}

}  // namespace

absl::Status CheckResumable(const petra::v1::JobSpec& from,
                            const petra::v1::JobSpec& spec) {
  MessageDifferencer differencer;
  std::string report;
  differencer.ReportDifferencesToString(&report);
  if (differencer.Compare(WithoutFreeFields(from), WithoutFreeFields(spec))) {
    return absl::OkStatus();
  }
  // The report names each field with both values, one per line.
  return absl::FailedPreconditionError(absl::StrCat(
      "the spec differs from the resumed job's where it must "
      "not (only name, epochs, max_steps, max_in_flight, "
      "grad_diagnostics_every, evaluation, checkpoint, devices and "
      "priority may change): ",
      absl::StrJoin(absl::StrSplit(absl::StripSuffix(report, "\n"), '\n'),
                    "; ")));
}

}  // namespace petra::coordinator
