// The TorchScript export of a job, made from its plain export on demand and
// kept beside it until a newer checkpoint replaces the plain one.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/job_layout.h"
#include "petra/v1/coordinator.pb.h"

namespace petra::coordinator {

// The path of layout.torchscript_file(), made now unless the one there was
// made from the current layout.export_file(). The model's input (the
// normalisation folded in, the class names) comes from the export's own
// input.* tensors; an export written before they existed takes it from
// `job`'s record, and a record from before that from the job's data
// under `data_root`, read again.
absl::StatusOr<std::string> TorchScriptFile(const JobLayout& layout,
                                            const petra::v1::Job& job,
                                            const std::string& data_root);

}  // namespace petra::coordinator
