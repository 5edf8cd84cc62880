// Runs one job on the fleet, start to end: loads the data, plans the
// partition, checks and assigns the stage servers, and for each epoch starts
// a training pass on every stage and feeds it (batches to the first stage,
// labels to the last), evaluates on the test split, checkpoints every stage
// (a copy kept under --state-dir, and the export file built from it), and
// releases the stages however the job ends. Progress goes to the record.
#pragma once

#include <string>
#include <vector>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_record.h"

namespace petra::coordinator {

struct RunnerEnvironment {
  std::vector<std::string> stage_addresses;  // the whole fleet
  std::string data_root;
  std::string state_dir;  // the coordinator's
  CoordinatorMetrics* metrics = nullptr;  // none when null
};

// Sets the record's final state (SUCCEEDED, FAILED with the reason, or
// CANCELLED when the record's cancel was requested).
void RunJob(JobRecord& record, const RunnerEnvironment& env);

// Where the coordinator keeps a job's files, relative to --state-dir.
std::string JobDirectory(const std::string& job_id);
// The export file of a job (absolute), present once a checkpoint exists.
std::string ExportPath(const std::string& state_dir, const std::string& job_id);

}  // namespace petra::coordinator
