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
#include <numeric>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/targets/drive_array.hpp"
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
  // An array of drives (drive_array.hpp) over `members` files instead of
  // the one file: a stripe of `chunk`-byte chunks, or a mirror.
  enum layout_t { single, stripe, mirror } layout = single;
  uint32_t members = 1;
  uint32_t chunk = 0;
  bool member_fails = false;  // a mirror's member 1 fails every read, write and flush after the first round
};
inline void PrintTo(const integrity_case& c, std::ostream* os) { *os << c.name; }

// The cases both suites run.
inline const integrity_case integrity_cases[] = {
    {"buffered_4k", false, 4096, false, false}, {"odirect_4k", true, 4096, false, false},
    {"buffered_512", false, 512, false, false}, {"odirect_512", true, 512, false, false},
    {"two_arrays", false, 4096, true, false},   {"slow_writes", false, 4096, false, true},
    // Chunks smaller than a page: every request splits over the members.
    {"stripe2_split", false, 4096, false, false, integrity_case::stripe, 2, 512},
    {"stripe3_split", false, 4096, false, false, integrity_case::stripe, 3, 1024},
    {"mirror2", false, 4096, false, false, integrity_case::mirror, 2},
    {"mirror3_member_fails", false, 4096, false, false, integrity_case::mirror, 3, 0, true}};

// The dataset's bytes for the case: `want`, rounded down to whole rounds of
// a stripe's chunks and whole pages, so that the array holds exactly the
// words the test tracks.
inline uint64_t integrity_bytes(const integrity_case& c, uint64_t want) {
  if (c.layout != integrity_case::stripe) return want;
  const uint64_t unit = std::lcm(uint64_t(c.members) * c.chunk, uint64_t(c.page));
  return want / unit * unit;
}

// The case's target over the file (writable; O_DIRECT; slow writes through a
// fault target, returned in `faults`) and its block size. Empty `why_not`
// unless the case cannot run here (O_DIRECT unsupported, or its alignment
// larger than the page).
struct integrity_target {
  std::shared_ptr<target> t;
  std::shared_ptr<fault_target> faults;
  uint32_t block = 512;
  std::string why_not;
  // Arrays: the member files (each holds its chunks of the pattern, or all
  // of it), the mirror, and the fault target over the member that fails.
  std::vector<std::unique_ptr<scratch_file>> member_files;
  std::shared_ptr<mirror_target> mirror;
  std::shared_ptr<fault_target> failing;

  // member_fails: from now on the member fails everything.
  void fail_member() const {
    if (!failing) return;
    for (auto k : {fault_rule::fail_read, fault_rule::fail_write, fault_rule::fail_flush}) {
      fault_rule r;
      r.kind = k;
      failing->add_rule(r);
    }
  }
};

// Member m's share of the pattern the dataset starts as: its chunks
// (stripe) or all of it (mirror).
inline std::vector<uint8_t> member_image(const integrity_case& c, uint64_t bytes, uint32_t m) {
  if (c.layout == integrity_case::mirror) return pattern_bytes(bytes, 0, original_seed);
  std::vector<uint8_t> img(bytes / c.members);
  for (uint64_t local = 0; local < img.size(); local += c.chunk) {
    const uint64_t chunk_index = local / c.chunk * c.members + m;
    fill_pattern(img.data() + local, c.chunk, chunk_index * c.chunk, original_seed);
  }
  return img;
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
  const bool ok = fd >= 0 && pwrite(fd, bytes.data(), bytes.size(), 0) == ssize_t(bytes.size());
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("writing " + path + " failed");
}

struct integrity_target;
inline integrity_target open_integrity_target(const integrity_case& c, const std::string& path, uint64_t bytes);

// The array of the case over member files of its own, each opened as the
// single-file case would open it.
inline integrity_target open_integrity_array(const integrity_case& c, uint64_t bytes) {
  integrity_target r;
  std::vector<std::shared_ptr<target>> members;
  integrity_case one = c;
  one.layout = integrity_case::single;
  for (uint32_t m = 0; m < c.members; ++m) {
    r.member_files.push_back(std::make_unique<scratch_file>());
    write_file(r.member_files.back()->path(), member_image(c, bytes, m));
    integrity_target t = open_integrity_target(one, r.member_files.back()->path(), bytes);
    if (!t.why_not.empty()) {
      r.why_not = t.why_not;
      return r;
    }
    r.block = std::max(r.block, t.block);
    if (c.member_fails && m == 1) {
      r.failing = make_fault_target(t.t);
      t.t = r.failing;
    }
    members.push_back(t.t);
  }
  if (c.layout == integrity_case::stripe) {
    r.t = make_striped_target(std::move(members), c.chunk);
  } else {
    r.mirror = make_mirrored_target(std::move(members));
    r.t = r.mirror;
  }
  if (r.t->size() != bytes) throw std::runtime_error("the array holds " + std::to_string(r.t->size()) + " bytes, not " +
                                                     std::to_string(bytes));
  return r;
}
inline integrity_target open_integrity_target(const integrity_case& c, const std::string& path, uint64_t bytes) {
  if (c.layout != integrity_case::single) return open_integrity_array(c, bytes);
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

// The same for the case's storage: the file, or every member of an array
// (a stripe's members each hold their chunks; each of a mirror's members in
// service holds every word; the one that failed holds stale words and is
// out of service). `first` is a dataset word index.
inline uint64_t wrong_words_on_storage(const integrity_case& c, const integrity_target& t, const std::string& path,
                                       uint64_t bytes, const uint32_t* written, uint64_t& first) {
  if (c.layout == integrity_case::single) return wrong_words_on_storage(path, bytes, written, first);
  uint64_t bad = 0;
  for (uint32_t m = 0; m < c.members; ++m) {
    if (c.member_fails && m == 1) continue;
    if (c.layout == integrity_case::mirror) {
      bad += wrong_words_on_storage(t.member_files[m]->path(), bytes, written, first);
      continue;
    }
    const std::vector<uint64_t> words = file_words(t.member_files[m]->path(), bytes / c.members);
    const uint64_t per_chunk = c.chunk / 8;
    for (uint64_t local = 0; local < words.size(); ++local) {
      const uint64_t i = (local / per_chunk * c.members + m) * per_chunk + local % per_chunk;
      if (words[local] != final_word(written, i) && bad++ == 0) first = i;
    }
  }
  return bad;
}

// What an array must report after the rounds, "" when it does: a mirror's
// members each served reads, and only the member made to fail is out of
// service, with its error.
inline std::string array_report_problem(const integrity_case& c, const integrity_target& t) {
  if (!t.mirror) return {};
  const std::vector<mirror_member_state> ms = t.mirror->members();
  const uint32_t want_failed = c.member_fails ? 1 : 0;
  if (t.mirror->failed_members() != want_failed)
    return std::to_string(t.mirror->failed_members()) + " members failed, not " + std::to_string(want_failed) + ": " +
           t.mirror->describe();
  for (size_t m = 0; m < ms.size(); ++m) {
    const bool should_fail = c.member_fails && m == 1;
    if (ms[m].failed != should_fail || ms[m].error.empty() == should_fail)
      return "member " + std::to_string(m) + (should_fail ? " should" : " should not") + " be reported failed: " +
             t.mirror->describe();
    if (ms[m].reads == 0) return "member " + std::to_string(m) + " served no reads: " + t.mirror->describe();
  }
  if (c.member_fails && (t.mirror->describe().find("(1 failed)") == std::string::npos ||
                         t.mirror->describe().find("[failed]") == std::string::npos))
    return "describe() does not name the failed member: " + t.mirror->describe();
  return {};
}

}  // namespace deepwell::test
