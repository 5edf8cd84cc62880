// `petra spec`: builds a JobSpec from a file and/or the job flags, applies
// defaults and validation, and prints the resolved spec. The same job flags
// and the same validation a coordinator applies on submit.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/command_table.h"
#include "client/default_job.h"
#include "services/base/flag_set.h"
#include "services/job/job_flags.h"
#include "services/job/job_spec_io.h"
#include "services/job/job_spec_validation.h"

namespace petra::client {

int RunSpec(const std::string& program, const std::vector<std::string>& args) {
  std::string from;
  petra::v1::JobSpec overrides;
  base::FlagSet flags(
      absl::StrCat(program, " spec [--from FILE] [job flags]"),
      "Resolves a job spec: reads FILE (JSON, or text proto when it ends in\n"
      ".txtpb/.textproto/.pbtxt), applies the job flags over it, fills the\n"
      "defaults and validates the result as the coordinator would. Prints\n"
      "the resolved spec as JSON, or every problem found (exit 1). Without\n"
      "--from the base is the default job of `petra train` and `petra\n"
      "submit` (the flags below show its values as their defaults), so\n"
      "`spec [flags]` shows what `submit [flags]` sends.");
  flags.AddString("from", &from,
                  absl::StrCat(job::kJobSpecFileHelp, ", to start from"));
  job::AddJobFlags(flags, &overrides, DefaultTrainJob());
  if (int rc = base::ParseCommandOrExit(flags, program + " spec", args);
      rc >= 0) {
    return rc;
  }
  absl::StatusOr<petra::v1::JobSpec> resolved =
      job::AssembleJobSpec(DefaultTrainJob(), from, overrides);
  if (!resolved.ok()) {
    std::cerr << program << " spec: " << resolved.status().message() << "\n";
    return 1;
  }
  std::cout << job::JobSpecToJson(*resolved);
  return 0;
}

}  // namespace petra::client
