// Runs one job on the fleet, start to end: loads the data, plans the
// partition, checks and assigns the stage servers, and for each epoch starts
// a training pass on every stage and feeds it (batches to the first stage,
// labels to the last), evaluates on the test split, checkpoints every stage
// (a copy kept under --state-dir, and the export file built from it), and
// releases the stages however the job ends. Progress goes to the record.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_record.h"
#include "services/wire/transport_security.h"

namespace petra::coordinator {

struct RunnerEnvironment {
  std::vector<std::string> stage_addresses;  // the whole fleet
  std::string data_root;
  std::string state_dir;  // the coordinator's
  CoordinatorMetrics* metrics = nullptr;  // none when null
  // TLS of the calls to the stages: the coordinator's own certificate.
  wire::TransportSecurity security;
  // A running job that loses a stage server waits this long for it (or an
  // idle spare) to answer before it fails.
  std::chrono::seconds recovery_timeout{120};
  // Recoveries in a row without a finished epoch before the job fails: a
  // stage that crashes on every start must not loop forever.
  uint32_t max_recoveries = 3;
};

// Sets the record's final state (SUCCEEDED, FAILED with the reason, or
// CANCELLED when the record's cancel was requested).
void RunJob(JobRecord& record, const RunnerEnvironment& env);

// Where the coordinator keeps a job's files, relative to --state-dir.
std::string JobDirectory(const std::string& job_id);
// The export file of a job (absolute), present once a checkpoint exists.
std::string ExportPath(const std::string& state_dir, const std::string& job_id);

}  // namespace petra::coordinator
