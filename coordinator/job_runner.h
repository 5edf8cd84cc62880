// Runs one job on the fleet, start to end, and sets its final state. The
// work is FleetRunner's (fleet_runner.h: data, partition, stage servers,
// passes, checkpoints, recovery); the stages are released however the job
// ends.
#pragma once

#include "coordinator/job_record.h"
#include "coordinator/runner_environment.h"

namespace petra::coordinator {

// Sets the record's final state (SUCCEEDED, FAILED with the reason, or
// CANCELLED when the record's cancel was requested), or leaves it
// RECOVERING when the coordinator is stopping.
void RunJob(JobRecord& record, const RunnerEnvironment& env);

// RunJob on the job's own thread: an exception that escapes it (a bug:
// every path is meant to end in a status) fails that job, saying so,
// instead of ending the coordinator with every other job.
void RunJobCatching(JobRecord& record, const RunnerEnvironment& env);

}  // namespace petra::coordinator
