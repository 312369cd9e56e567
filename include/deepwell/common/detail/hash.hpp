// deepwell's two 64-bit mixers, each frozen: stored bytes depend on them
// (the log's row tags and checksums, the KV store's salts and sums) and so
// does what a seed generates (graphs), so a change would make old files
// unreadable or a seed give another graph. The cache's directory uses
// fmix64 too, where any good mixer would do.
#pragma once
#include <cstdint>

#include "deepwell/common/config.hpp"

namespace deepwell::detail {

// MurmurHash3's 64-bit finalizer.
DW_HD constexpr uint64_t fmix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// splitmix64's finalizer: the graph generators' (a seed's graph is fixed).
DW_HD constexpr uint64_t splitmix64_mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace deepwell::detail
