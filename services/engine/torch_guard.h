// Where torch's exceptions end: a call into torch that throws becomes a
// status naming the stage and what it was doing, on one line, without
// torch's backtrace. Running out of memory, the device's or the host's, is
// RESOURCE_EXHAUSTED: the job cannot fit, the server itself is fine.
#pragma once

#include <c10/util/Exception.h>

#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace petra::engine {
namespace torch_guard_internal {

// The allocator's message runs on with advice about fragmentation settings.
inline std::string FirstLine(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

// " allocating 0.01 GB" (or "") when `message` is the host allocator's
// failure ("... DefaultCPUAllocator: can't allocate memory: you tried to
// allocate N bytes. Error code 12 ..."); nullopt for any other message.
inline std::optional<std::string> HostOutOfMemory(const std::string& message) {
  if (message.find("DefaultCPUAllocator") == std::string::npos) {
    return std::nullopt;
  }
  const size_t at = message.find("tried to allocate ");
  int64_t bytes = 0;
  if (at != std::string::npos) {
    const size_t from = at + 18;
    if (absl::SimpleAtoi(message.substr(from, message.find(' ', from) - from),
                         &bytes)) {
      return absl::StrFormat(" allocating %.2f GB", bytes / 1e9);
    }
  }
  return std::string();
}

// What to change when a stage runs out of memory.
inline constexpr char kOutOfMemoryAdvice[] =
    "lower --micro-batch, cut the network into more stages (--stages), or "
    "give the stage more memory";

}  // namespace torch_guard_internal

// What torch threw, as a status on one line without its backtrace, under
// `prefix`: a failed host allocation is RESOURCE_EXHAUSTED ("out of memory
// allocating N GB"), anything else `code`.
inline absl::Status TorchError(const std::exception& e,
                               absl::string_view prefix,
                               absl::StatusCode code) {
  const auto* torch = dynamic_cast<const c10::Error*>(&e);
  const std::string message = torch_guard_internal::FirstLine(
      torch != nullptr ? torch->what_without_backtrace() : e.what());
  if (std::optional<std::string> asked =
          torch_guard_internal::HostOutOfMemory(message)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(prefix, "out of memory", *asked));
  }
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(prefix, "out of memory (an allocation failed)"));
  }
  return absl::Status(code, absl::StrCat(prefix, message));
}

// Runs `f` (returning a status or StatusOr); torch's backtrace is kilobytes
// of frames that say nothing to the user, so it is left out.
template <typename F>
auto Guard(int stage, absl::string_view what, F&& f) -> decltype(f()) {
  using torch_guard_internal::FirstLine;
  using torch_guard_internal::kOutOfMemoryAdvice;
  try {
    return f();
  } catch (const c10::OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "stage ", stage, ": ", what, ": out of device memory: ",
        FirstLine(e.what_without_backtrace()), "; ", kOutOfMemoryAdvice));
  } catch (const std::exception& e) {
    // The host's memory, torch's or the C++ allocator's, as TorchError says
    // it, with what to change.
    const absl::Status s =
        TorchError(e, absl::StrCat("stage ", stage, ": ", what, ": "),
                   absl::StatusCode::kInternal);
    if (absl::IsResourceExhausted(s)) {
      return absl::ResourceExhaustedError(
          absl::StrCat(s.message(), "; ", kOutOfMemoryAdvice));
    }
    return s;
  }
}

}  // namespace petra::engine
