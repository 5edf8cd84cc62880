// The TorchScript export of a job, made from its plain export on demand and
// kept beside it until a newer checkpoint replaces the plain one.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/job_layout.h"
#include "petra/v1/job.pb.h"

namespace petra::coordinator {

// The path of layout.torchscript_file(), made now unless the one there was
// made from the current layout.export_file(). `resolved` is the job's spec;
// its dataset (under `data_root`) gives the input normalisation to fold in.
absl::StatusOr<std::string> TorchScriptFile(const JobLayout& layout,
                                            const petra::v1::JobSpec& resolved,
                                            const std::string& data_root);

}  // namespace petra::coordinator
