// What a stage server's data streams may hold of micro-batches that are not
// whole yet (parts still to come, a data channel's payload fetched): at most
// `stream_limit` bytes a stream and `server_limit` bytes all streams
// together. A message past either is refused before it is kept, with
// RESOURCE_EXHAUSTED naming the limit and its flag; a whole micro-batch
// gives its bytes back when it goes to the mailbox, whose credits bound it
// from there. No gRPC.
#pragma once

#include <cstdint>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace petra::stage_server {

// The stage server's --max-stream-bytes and --max-receive-bytes defaults.
inline constexpr int64_t kDefaultMaxStreamBytes = int64_t{4} << 30;
inline constexpr int64_t kDefaultMaxReceiveBytes = int64_t{16} << 30;

class ReceiveBudget {
 public:
  ReceiveBudget(uint64_t server_limit, uint64_t stream_limit)
      : server_limit_(server_limit), stream_limit_(stream_limit) {}

  // Takes `bytes` more for a stream that holds `held` already.
  absl::Status Take(uint64_t held, uint64_t bytes) {
    if (held + bytes > stream_limit_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a micro-batch of ", held + bytes,
          " bytes or more is past the stream limit of ", stream_limit_,
          " bytes (the stage server's --max-stream-bytes)"));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (held_ + bytes > server_limit_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the stage server's streams would hold ", held_ + bytes,
          " bytes of micro-batches not yet whole, past its limit of ",
          server_limit_, " bytes (--max-receive-bytes)"));
    }
    held_ += bytes;
    return absl::OkStatus();
  }
  // Counts `bytes` the stream already holds (a data channel's payload,
  // fetched while its message was read): later messages see them.
  void Add(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    held_ += bytes;
  }
  // Gives back what Take and Add took.
  void Give(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    held_ -= bytes < held_ ? bytes : held_;
  }
  uint64_t held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  uint64_t server_limit() const { return server_limit_; }
  uint64_t stream_limit() const { return stream_limit_; }

 private:
  const uint64_t server_limit_;
  const uint64_t stream_limit_;
  std::mutex mu_;
  uint64_t held_ = 0;
};

}  // namespace petra::stage_server
