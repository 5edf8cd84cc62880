#include "coordinator/coordinator_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace petra::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Exposition(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

// A job's gauges carry its id beside petra_job_info, and go when it ends:
// the label set stays bounded by the jobs running now.
TEST(CoordinatorMetrics, JobSeriesCarryTheJobIdAndGoWhenItEnds) {
  prometheus::Registry registry;
  CoordinatorMetrics metrics(&registry);
  petra::v1::JobSpec spec;
  spec.set_name("run \"A\"");
  spec.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  spec.mutable_training()->set_mode(petra::v1::TRAINING_MODE_PETRA);
  metrics.JobStarted("job-7", spec);
  petra::v1::Progress p;
  p.set_epoch(2);
  p.set_step(40);
  p.set_train_loss(0.5);
  metrics.Progress("job-7", p);
  std::string text = Exposition(registry);
  EXPECT_THAT(text, HasSubstr("petra_job_info{architecture=\"revnet18\","
                              "job_id=\"job-7\",mode=\"petra\","
                              "name=\"run \\\"A\\\"\"} 1"));
  EXPECT_THAT(text,
              HasSubstr("petra_job_optimizer_steps{job_id=\"job-7\"} 40"));
  EXPECT_THAT(
      text, HasSubstr("petra_job_loss{job_id=\"job-7\",split=\"train\"} 0.5"));
  metrics.CheckpointFailed();
  EXPECT_THAT(Exposition(registry),
              HasSubstr("petra_job_checkpoint_failures_total 1"));
  // Servers by job: two jobs at once, each its own series.
  metrics.JobServers("job-7", 2);
  metrics.JobServers("job-9", 3);
  text = Exposition(registry);
  EXPECT_THAT(text, HasSubstr("petra_job_stage_servers{job_id=\"job-7\"} 2"));
  EXPECT_THAT(text, HasSubstr("petra_job_stage_servers{job_id=\"job-9\"} 3"));
  metrics.JobEnded("job-9");

  metrics.JobEnded("job-7");
  text = Exposition(registry);
  EXPECT_THAT(text, Not(HasSubstr("job-7")));
  // Nothing is left of it: an alert on a job's steps cannot fire on a job
  // that ended.
  EXPECT_THAT(text, Not(HasSubstr("petra_job_optimizer_steps")));
  metrics.JobEnded("job-7");  // twice is harmless
  metrics.Progress("job-8", p);
  EXPECT_THAT(Exposition(registry),
              HasSubstr("petra_job_epoch{job_id=\"job-8\"} 2"));
}

}  // namespace
}  // namespace petra::coordinator
