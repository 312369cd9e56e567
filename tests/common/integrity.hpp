// The standing integrity test's work, for CPU threads and GPU warps alike:
// every word of the dataset starts as original_word(i) and, once written,
// holds written_word(i). Rounds of random reads and writes check as they go
// that no read sees a value that was never written (and none sees the
// original after a write to the word completed); afterwards the caller
// checks storage with plain POSIX reads and the cache again after a clear.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/views/array.hpp"
#include "pattern.hpp"
#include "scratch_file.hpp"

namespace deepwell::test {

// The dataset file is scratch_file(bytes, original_seed).
constexpr uint64_t original_seed = 21, written_seed = 22;
DW_HD inline uint64_t original_word(uint64_t i) { return pattern_word(i * 8, original_seed); }
DW_HD inline uint64_t written_word(uint64_t i) { return pattern_word(i * 8, written_seed); }

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
// bitmap of words whose write has completed. With `lanes` > 1 a worker
// touches only the words i with i % lanes == lane: the pages are still
// shared, the words are not (for ThreadSanitizer, which rightly calls a
// plain read and write of one word by two threads a race: the cache is
// memory, and such a program races on it).
template <class Warp>
DW_HD void integrity_round(const Warp& w, const array_ref<uint64_t>& a, const array_ref<uint64_t>& b,
                           uint64_t seed, uint32_t ops, uint32_t write_pct, uint32_t* written,
                           integrity_counts* counts, uint32_t lanes = 1, uint32_t lane = 0) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  unsigned long long reads = 0, writes = 0, wrong = 0, failed = 0;
  for (uint32_t k = 0; k < ops; ++k) {
    const uint64_t r = integrity_rng(x);
    const uint64_t i = lanes > 1 ? ((r >> 8) % (a.size() / lanes)) * lanes + lane : (r >> 8) % a.size();
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

// ---- the host side both suites share ----

struct integrity_case {
  const char* name;
  bool odirect;
  uint32_t page;
  bool two_arrays;
  bool slow_writes;  // some writes held back past the deadline
};
inline void PrintTo(const integrity_case& c, std::ostream* os) { *os << c.name; }

// The cases both suites run.
inline const integrity_case integrity_cases[] = {
    {"buffered_4k", false, 4096, false, false}, {"odirect_4k", true, 4096, false, false},
    {"buffered_512", false, 512, false, false}, {"odirect_512", true, 512, false, false},
    {"two_arrays", false, 4096, true, false},   {"slow_writes", false, 4096, false, true}};

// The case's target over the file (writable; O_DIRECT; slow writes through a
// fault target, returned in `faults`) and its block size. Empty `why_not`
// unless the case cannot run here (O_DIRECT unsupported, or its alignment
// larger than the page).
struct integrity_target {
  std::shared_ptr<target> t;
  std::shared_ptr<fault_target> faults;
  uint32_t block = 512;
  std::string why_not;
};
inline integrity_target open_integrity_target(const integrity_case& c, const std::string& path, uint64_t bytes) {
  integrity_target r;
  file_options o;
  o.writable = true;
  o.direct = c.odirect;
  try {
    r.t = open_file_target(path, o);
  } catch (const error& e) {
    r.why_not = e.what();
    return r;
  }
  r.block = std::max<uint32_t>(512, r.t->io_alignment());
  if (r.block > c.page) {
    r.why_not = "O_DIRECT here needs " + std::to_string(r.block) + "-byte blocks, more than a page";
    return r;
  }
  if (c.slow_writes) {
    r.faults = make_fault_target(r.t);
    fault_rule slow;
    slow.kind = fault_rule::delay_write;
    slow.offset = bytes / 3;
    slow.length = bytes / 64;
    slow.delay_ns = 500'000'000;  // past integrity_timeout_ns
    slow.count = 6;
    r.faults->add_rule(slow);
    r.t = r.faults;
  }
  return r;
}
// slow_writes: a deadline its delayed writes outlast, on purpose. The others:
// a minute. O_DIRECT on the two-core CI machine timed out a few of 120,000
// accesses at 20 s: write-backs stalled in io_uring's per-file io-wq chain,
// which the io_uring engine no longer uses for writes (uring_engine.cpp);
// a hang still fails at ctest's limit.
inline uint64_t integrity_timeout_ns(const integrity_case& c) {
  return c.slow_writes ? 200'000'000ull : 60'000'000'000ull;
}

// flush() (or clear()) until it stops timing out: writes held back past the
// deadline make it report a timeout until they have landed.
template <class F>
request_status until_no_timeout(F&& f) {
  request_status r;
  for (int i = 0; i < 50; ++i) {
    r = f();
    if (r.code != client_code::timeout) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return r;
}

// Words of the file (plain pread) that differ from what they must hold;
// `first` is one of them.
inline uint64_t wrong_words_on_storage(const std::string& path, uint64_t bytes, const uint32_t* written, uint64_t& first) {
  const std::vector<uint64_t> file = file_words(path, bytes);
  uint64_t bad = 0;
  for (uint64_t i = 0; i < file.size(); ++i)
    if (file[i] != final_word(written, i) && bad++ == 0) first = i;
  return bad;
}

}  // namespace deepwell::test
