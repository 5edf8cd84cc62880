// The checks behind ResolveJobSpec, by concern; each adds every problem it
// finds to one list, so a spec's problems are reported at once.
// Internal to services/job.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/generated_enum_reflection.h"
#include "petra/v1/job.pb.h"
#include "services/job/enum_names.h"

namespace petra::job::spec_checks {

// Upper bounds far beyond any real job; they exist so that a typo such as an
// extra zero is reported instead of stalling a fleet.
inline constexpr uint32_t kMaxAccumulationSteps = 4096;
inline constexpr uint32_t kMaxMicroBatchSize = 65536;
inline constexpr uint32_t kMaxEpochs = 100000;
inline constexpr uint32_t kMaxReplicas = 1024;
inline constexpr int32_t kMaxPriority = 100;  // and -100 the lowest
inline constexpr uint32_t kMaxClasses = 1000000;
inline constexpr double kMaxWidth = 8.0;
inline constexpr uint32_t kMaxEmbedDim = 8192;
inline constexpr uint32_t kMaxDepth = 256;
inline constexpr double kMaxMlpRatio = 16.0;
inline constexpr int64_t kMaxTokens = 4096;
inline constexpr uint32_t kMaxCropPadding = 64;
// Samples of a synthetic split (made in memory, 1 to 4 bytes a pixel).
inline constexpr uint64_t kMaxSyntheticSamples = uint64_t{1} << 20;
inline constexpr size_t kMaxNameLength = 128;

class Problems {
 public:
  template <typename V>
  void Add(const std::string& field, const V& value, const std::string& why) {
    list_.push_back(absl::StrCat(field, " = ", value, ": ", why));
  }
  void AddRaw(std::string text) { list_.push_back(std::move(text)); }
  bool empty() const { return list_.empty(); }
  absl::Status ToStatus() const {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job spec: ", absl::StrJoin(list_, "; ")));
  }

 private:
  std::vector<std::string> list_;
};

inline std::string Num(double v) { return absl::StrFormat("%g", v); }

// An enum must be a value the proto declares (proto3 keeps unknown numbers).
template <typename E>
bool CheckEnum(Problems& p, const std::string& field, int value,
               bool required) {
  const google::protobuf::EnumDescriptor* type =
      google::protobuf::GetEnumDescriptor<E>();
  if (type->FindValueByNumber(value) == nullptr) {
    p.Add(field, value,
          absl::StrCat("unknown value (expected one of ",
                       absl::StrJoin(EnumShortNames(type), ", "), ")"));
    return false;
  }
  if (required && value == 0) {
    p.Add(field, "unspecified",
          absl::StrCat("required (one of ",
                       absl::StrJoin(EnumShortNames(type), ", "), ")"));
    return false;
  }
  return true;
}

// Model and data (model_data_checks.cc).
void CheckModelAndData(const petra::v1::JobSpec& s, Problems& p);
void CheckPartitionAndDevices(const petra::v1::JobSpec& s, Problems& p);
// Training, optimizer and schedule (training_checks.cc).
void CheckTraining(const petra::v1::JobSpec& s, Problems& p);
void CheckOptimizerAndSchedule(const petra::v1::JobSpec& s, Problems& p);

}  // namespace petra::job::spec_checks
