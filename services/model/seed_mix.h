// SplitMix64 (Steele, Lea and Flood 2014), for seeds derived from a job's
// seed: the per-block initialisation and the forward-gradient draws. Inline
// and torch-free so that both can use it without a library between them.
#pragma once

#include <cstdint>

namespace petra::model {

// SplitMix64's output function: a bijection that scatters nearby inputs.
inline uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One SplitMix64 step from state `x`.
inline uint64_t SplitMix64(uint64_t x) {
  return Mix64(x + 0x9e3779b97f4a7c15ULL);
}

}  // namespace petra::model
