// The service fuzzer as a plain program (no libFuzzer): random inputs for
// --seconds, from --seed, through RunOneInput (service_requests_fuzz.cc).
// CI runs it briefly in the main build; `bash scripts/fuzz.sh --services`
// runs the libFuzzer build under ASan and UBSan for as long as asked.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "services/base/flag_set.h"

namespace petra::fuzz {
void RunOneInput(const uint8_t* data, size_t size);
void StopServers();
}  // namespace petra::fuzz

int main(int argc, char** argv) {
  int64_t seconds = 20, seed = 1;
  petra::base::FlagSet flags(
      "petra_fuzz_services_random [--seconds N] [--seed S]",
      "Sends random, mutated requests of every RPC to a stage server and a\n"
      "coordinator started in this process, for N seconds; exits non-zero\n"
      "(abort) at the first call that hangs or server that stops answering.");
  flags.AddInt("seconds", &seconds, "how long to send inputs");
  flags.AddInt("seed", &seed, "the random inputs' seed");
  if (int rc = petra::base::ParseOrExit(flags, argc, argv); rc >= 0) return rc;
  if (seconds < 1) {
    std::fprintf(stderr, "--seconds must be at least 1\n");
    return 2;
  }
  std::mt19937_64 random(static_cast<uint64_t>(seed));
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int64_t inputs = 0;
  std::vector<uint8_t> input;
  while (std::chrono::steady_clock::now() < end) {
    input.resize(2 + random() % 256);
    for (uint8_t& b : input) b = static_cast<uint8_t>(random());
    petra::fuzz::RunOneInput(input.data(), input.size());
    ++inputs;
  }
  petra::fuzz::StopServers();
  std::printf("service fuzz: %lld inputs in %lld s (seed %lld), no finding\n",
              static_cast<long long>(inputs), static_cast<long long>(seconds),
              static_cast<long long>(seed));
  std::fflush(stdout);
  // The servers' gRPC threads may outlive main's statics: no teardown.
  std::_Exit(0);
}
