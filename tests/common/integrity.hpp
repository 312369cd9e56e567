// The standing integrity test's work, for CPU threads and GPU warps alike:
// every word of the dataset starts as original_word(i) and, once written,
// holds written_word(i). Rounds of random reads and writes check as they go
// that no read sees a value that was never written (and none sees the
// original after a write to the word completed); afterwards the caller
// checks storage with plain POSIX reads and the cache again after a clear.
#pragma once
#include <cstdint>

#include "deepwell/array.hpp"
#include "pattern.hpp"

namespace deepwell::test {

DW_HD inline uint64_t original_word(uint64_t i) { return pattern_word(i * 8, 21); }
DW_HD inline uint64_t written_word(uint64_t i) { return pattern_word(i * 8, 22); }

struct integrity_counts {
  unsigned long long reads, writes, wrong, failed;
  unsigned long long first_wrong;  // a word index that read wrong (for the message)
};

DW_HD inline uint64_t integrity_rng(uint64_t& x) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

// One worker's share of a round: `ops` accesses at random words, a write
// with probability write_pct / 100. Writes alternate between the views `a`
// and `b` (two arrays over one namespace when they differ). `written` is a
// bitmap of words whose write has completed.
template <class Warp>
DW_HD void integrity_round(const Warp& w, const array_ref<uint64_t>& a, const array_ref<uint64_t>& b,
                           uint64_t seed, uint32_t ops, uint32_t write_pct, uint32_t* written,
                           integrity_counts* counts) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  unsigned long long reads = 0, writes = 0, wrong = 0, failed = 0;
  for (uint32_t k = 0; k < ops; ++k) {
    const uint64_t r = integrity_rng(x);
    const uint64_t i = (r >> 8) % a.size();
    const bool write = (r & 0xFF) % 100 < write_pct;
    const array_ref<uint64_t>& view = (k & 1) ? b : a;
    client_atomic<uint32_t> bits(written[i / 32]);
    const bool was_written = (bits.load(memory_order_acquire) >> (i % 32)) & 1;
    if (write) {
      const request_status s = view.write(w, i, written_word(i));
      if (s.ok()) {
        bits.fetch_or(1u << (i % 32), memory_order_release);
        ++writes;
      } else {
        ++failed;
      }
    } else {
      request_status s;
      const uint64_t v = view.read(w, i, &s);
      if (!s.ok()) {
        ++failed;
      } else {
        ++reads;
        const bool ok = v == written_word(i) || (!was_written && v == original_word(i));
        if (!ok) {
          ++wrong;
          client_atomic<unsigned long long>(counts->first_wrong).store(i, memory_order_relaxed);
        }
      }
    }
  }
  client_atomic<unsigned long long>(counts->reads).fetch_add(reads, memory_order_relaxed);
  client_atomic<unsigned long long>(counts->writes).fetch_add(writes, memory_order_relaxed);
  client_atomic<unsigned long long>(counts->wrong).fetch_add(wrong, memory_order_relaxed);
  client_atomic<unsigned long long>(counts->failed).fetch_add(failed, memory_order_relaxed);
}

// What word i must hold once every write has landed.
inline uint64_t final_word(const uint32_t* written, uint64_t i) {
  return (written[i / 32] >> (i % 32)) & 1 ? written_word(i) : original_word(i);
}

}  // namespace deepwell::test
