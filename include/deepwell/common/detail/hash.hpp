// deepwell's two 64-bit mixers, each frozen: stored bytes depend on them
// (the log's row tags and checksums, the KV store's salts and sums) and so
// does what a seed generates (graphs), so a change would make old files
// unreadable or a seed give another graph. The cache's directory uses
// fmix64 too, where any good mixer would do.
#pragma once
#include <cstdint>

#include "deepwell/common/config.hpp"

namespace deepwell::detail {

// Both are one finalizer, xor-shift, multiply, xor-shift, multiply,
// xor-shift, with their own shifts and multipliers.
template <unsigned S1, uint64_t M1, unsigned S2, uint64_t M2, unsigned S3>
DW_HD constexpr uint64_t xorshift_multiply(uint64_t x) {
  x ^= x >> S1;
  x *= M1;
  x ^= x >> S2;
  x *= M2;
  x ^= x >> S3;
  return x;
}

// MurmurHash3's 64-bit finalizer.
DW_HD constexpr uint64_t fmix64(uint64_t x) {
  return xorshift_multiply<33, 0xff51afd7ed558ccdull, 33, 0xc4ceb9fe1a85ec53ull, 33>(x);
}

// splitmix64's finalizer: the graph generators' (a seed's graph is fixed).
DW_HD constexpr uint64_t splitmix64_mix(uint64_t x) {
  return xorshift_multiply<30, 0xbf58476d1ce4e5b9ull, 27, 0x94d049bb133111ebull, 31>(x);
}

}  // namespace deepwell::detail
