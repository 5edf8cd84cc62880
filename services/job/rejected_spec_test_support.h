// The case and fixture of the job spec rejection tests
// (job_spec_rejections_test.cc and job_spec_rejections_more_test.cc): one
// parameterised test, its cases in two files.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <ostream>
#include <string>

#include "petra/v1/job.pb.h"

namespace petra::job {

// `s` made a language model of `arch` on text.
inline void AsLanguageModel(petra::v1::JobSpec* s,
                            petra::v1::Architecture arch) {
  s->mutable_model()->set_architecture(arch);
  s->mutable_model()->clear_width();
  s->mutable_dataset()->Clear();
  s->mutable_dataset()->set_kind(petra::v1::DATASET_KIND_TEXT);
}

struct RejectCase {
  std::string name;
  std::function<void(petra::v1::JobSpec*)> mutate;
  // "<field> = <value>" and the reason, as they must appear in the message.
  std::string field_and_value;
  std::string reason;
};

// Test names carry the case name; print only that, not the bytes.
inline void PrintTo(const RejectCase& c, std::ostream* os) { *os << c.name; }

class RejectedSpec : public ::testing::TestWithParam<RejectCase> {};

}  // namespace petra::job
