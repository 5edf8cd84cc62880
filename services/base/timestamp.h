// Now as a protobuf Timestamp, to the microsecond: protobuf's
// TimeUtil::GetCurrentTime (3.21, Debian's) keeps whole seconds only, which
// made two jobs' start and end times, or a job's events, tie.
#pragma once

#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/time_util.h>

#include <chrono>

namespace petra::base {

inline google::protobuf::Timestamp NowTimestamp() {
  return google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
}

}  // namespace petra::base
