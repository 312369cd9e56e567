// What the stores' on-disk headers share: the KV store's superblock, the
// write-ahead log's header, the checkpoint's superblock and slot tables and
// the .dwg graph header each open with `char magic[8]` and `uint32_t
// version`, and the KV store's and the log's are sealed by the same 32-bit
// sum (each with a seed of its own). These write and check those parts;
// each format keeps its other fields, its checksum and its messages, and
// not a byte of any format changes.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>

#include "deepwell/common/detail/hash.hpp"

namespace deepwell::detail {

// Zeroes a header and writes its magic and version.
template <class Header>
void stamp_header(Header& h, const char (&magic)[8], uint32_t version) {
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, magic, sizeof h.magic);
  h.version = version;
}

template <class Header>
bool magic_matches(const Header& h, const char (&magic)[8]) {
  return std::memcmp(h.magic, magic, sizeof h.magic) == 0;
}

// Bytes [0, n) as 8-byte words (the last zero-padded), each mixed into an
// accumulator that starts at `seed`, with its offset; folded to 32 bits.
inline uint32_t folded_sum(const void* p, size_t n, uint64_t seed) {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t acc = seed;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = 0;
    std::memcpy(&v, b + i, std::min<size_t>(8, n - i));
    acc = fmix64(acc ^ v ^ (uint64_t(i) << 48));
  }
  return uint32_t(acc ^ (acc >> 32));
}

// The folded sum of a header's bytes before its `checksum` field.
template <class Header>
uint32_t sealed_sum(const Header& h, uint64_t seed) {
  return folded_sum(&h, offsetof(Header, checksum), seed);
}

// A random 64-bit nonce: a new store's or log's identity on disk.
inline uint64_t fresh_nonce() {
  std::random_device rd;
  const uint64_t t = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  return fmix64((uint64_t(rd()) << 32 | rd()) ^ t);
}

}  // namespace deepwell::detail
