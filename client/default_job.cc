#include "client/default_job.h"

namespace petra::client {

petra::v1::JobSpec DefaultTrainJob() {
  petra::v1::JobSpec s;
  s.set_name("default-revnet18-fashion-mnist");
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_model()->set_width(0.25);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
  // One stage per core of the 2-core machines it must run on: two stage
  // servers, each busy on its own core.
  s.mutable_partition()->set_stage_count(2);
  s.mutable_training()->set_epochs(3);
  s.set_seed(1);
  return s;
}

}  // namespace petra::client
