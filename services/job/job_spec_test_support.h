// What the job spec tests share.
#pragma once

#include "petra/v1/job.pb.h"

namespace petra::job {

// The smallest spec that resolves: an architecture and a dataset.
inline petra::v1::JobSpec MinimalSpec() {
  petra::v1::JobSpec s;
  s.mutable_model()->set_architecture(petra::v1::ARCHITECTURE_REVNET18);
  s.mutable_dataset()->set_kind(petra::v1::DATASET_KIND_FASHION_MNIST);
  return s;
}

}  // namespace petra::job
