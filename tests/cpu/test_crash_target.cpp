// The volatile-cache disk of crash tests (crash_target.hpp): reads see the
// cache, flushes and FUA writes reach the medium, each power-cut mode keeps
// what it says and nothing else (whole writes, sector pieces, any order of a
// subset), a dead disk refuses everything until revived, armed cuts fall on
// the request they name, seeds replay; and the same through the controller
// and a CPU client.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <latch>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "controller_test_support.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/link/host_client.hpp"
#include "deepwell/targets/crash_target.hpp"
#include "io_test_support.hpp"

using namespace deepwell;
namespace sc = deepwell::nvme::sc;

namespace {

using bytes_t = std::vector<uint8_t>;

// The target never uses the engine (everything completes at once), but the
// interface wants one.
io_engine& engine() {
  static std::unique_ptr<io_engine> io = make_io_engine(io_backend::threads, 8);
  return *io;
}

// Each call checks that the request completed before the call returned,
// exactly once.
int64_t write_at(volatile_cache_target& t, const bytes_t& data, uint64_t offset, bool fua = false) {
  test::completion c;
  t.write(engine(), data.data(), uint32_t(data.size()), offset, fua, c.callback());
  EXPECT_EQ(c.calls, 1u) << "a write must complete before write() returns";
  return c.result;
}

int64_t read_at(volatile_cache_target& t, bytes_t& out, uint64_t offset) {
  test::completion c;
  t.read(engine(), out.data(), uint32_t(out.size()), offset, c.callback());
  EXPECT_EQ(c.calls, 1u) << "a read must complete before read() returns";
  return c.result;
}

int64_t flush(volatile_cache_target& t) {
  test::completion c;
  t.flush(engine(), c.callback());
  EXPECT_EQ(c.calls, 1u) << "a flush must complete before flush() returns";
  return c.result;
}

bytes_t filled(size_t n, uint8_t v) { return bytes_t(n, v); }
bytes_t pattern(size_t n, uint64_t offset, uint64_t seed) { return test::pattern_bytes(n, offset, seed); }

void put(bytes_t& image, const bytes_t& data, uint64_t offset) {
  std::copy(data.begin(), data.end(), image.begin() + offset);
}

// The whole disk as reads see it.
bytes_t read_all(volatile_cache_target& t) {
  bytes_t all(t.size());
  EXPECT_EQ(read_at(t, all, 0), int64_t(all.size()));
  return all;
}

power_cut make_cut(power_cut::mode_t mode, uint64_t seed, double keep = 0.5) {
  power_cut p;
  p.mode = mode;
  p.seed = seed;
  p.keep_fraction = keep;
  return p;
}

struct write_op {
  uint64_t offset;
  bytes_t data;
};

}  // namespace

// ---- the target alone ----

TEST(CrashTarget, PropertiesAndDescription) {
  auto t = make_volatile_cache_target(8192, 512);
  EXPECT_EQ(t->size(), 8192u);
  EXPECT_TRUE(t->writable());
  EXPECT_EQ(t->io_alignment(), 1u);
  EXPECT_EQ(t->memory_alignment(), 1u);
  EXPECT_EQ(t->host_pointer(), nullptr);
  EXPECT_EQ(t->map_readonly(), nullptr);
  EXPECT_EQ(t->describe(), "volatile-cache disk (8192 bytes, 0 unflushed writes)");
  EXPECT_EQ(write_at(*t, filled(100, 1), 0), 100);
  EXPECT_EQ(write_at(*t, filled(100, 2), 200), 100);
  EXPECT_EQ(t->describe(), "volatile-cache disk (8192 bytes, 2 unflushed writes)");
  EXPECT_EQ(t->durable_image(), bytes_t(8192, 0)) << "a new disk is zeroed";
  EXPECT_THROW(make_volatile_cache_target(8192, 0), error);

  const bytes_t image = pattern(3000, 0, 5);
  auto u = make_volatile_cache_target(image, 4096);
  EXPECT_EQ(u->size(), 3000u);
  EXPECT_EQ(u->durable_image(), image);
  EXPECT_EQ(read_all(*u), image);
}

TEST(CrashTarget, ReadsSeeUnflushedWrites) {
  const bytes_t image = pattern(16384, 0, 1);
  auto t = make_volatile_cache_target(image);
  const bytes_t a = pattern(3000, 0, 2), b = pattern(1000, 0, 3);
  ASSERT_EQ(write_at(*t, a, 1000), 3000);
  ASSERT_EQ(write_at(*t, b, 2500), 1000);  // over the middle of a
  bytes_t expect = image;
  put(expect, a, 1000);
  put(expect, b, 2500);
  EXPECT_EQ(read_all(*t), expect);
  bytes_t part(700);
  ASSERT_EQ(read_at(*t, part, 2200), 700);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), expect.begin() + 2200));
  EXPECT_EQ(t->unflushed_writes(), 2u);
  EXPECT_EQ(t->durable_image(), image) << "nothing is durable before a flush";

  // Reads past the end zero-fill; writes past it are refused.
  bytes_t tail(1000, 0xEE);
  ASSERT_EQ(read_at(*t, tail, 16384 - 200), 1000);
  EXPECT_TRUE(std::equal(tail.begin(), tail.begin() + 200, expect.end() - 200));
  for (size_t i = 200; i < tail.size(); ++i) ASSERT_EQ(tail[i], 0) << i;
  EXPECT_EQ(write_at(*t, filled(100, 9), 16384 - 50), -EINVAL);
  EXPECT_EQ(write_at(*t, filled(1, 9), 16385), -EINVAL);
  EXPECT_EQ(write_at(*t, filled(50, 9), 16384 - 50), 50);  // up to the end is fine
  EXPECT_EQ(t->unflushed_writes(), 3u);
}

TEST(CrashTarget, FlushMakesWhatReadsSeeDurable) {
  auto t = make_volatile_cache_target(pattern(65536, 0, 1));
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200; ++i) {
    const uint64_t len = 1 + rng() % 3000, off = rng() % (65536 - len);
    ASSERT_EQ(write_at(*t, pattern(len, off, 100 + i), off, rng() % 4 == 0), int64_t(len));
  }
  const bytes_t seen = read_all(*t);
  ASSERT_EQ(flush(*t), 0);
  EXPECT_EQ(t->unflushed_writes(), 0u);
  EXPECT_EQ(t->flushes(), 1u);
  EXPECT_EQ(t->durable_image(), seen);
  EXPECT_EQ(read_all(*t), seen);
}

TEST(CrashTarget, DropAllLosesEveryUnflushedWriteAndKeepsFlushedOnes) {
  const bytes_t image = pattern(32768, 0, 1);
  auto t = make_volatile_cache_target(image);
  bytes_t expect = image;
  const bytes_t a = pattern(4096, 0, 2), b = pattern(777, 0, 3);
  ASSERT_EQ(write_at(*t, a, 0), 4096);
  ASSERT_EQ(write_at(*t, b, 10000), 777);
  put(expect, a, 0);
  put(expect, b, 10000);
  ASSERT_EQ(flush(*t), 0);
  EXPECT_EQ(t->durable_image(), expect);
  // Unflushed: over a flushed write, elsewhere, and over each other.
  ASSERT_EQ(write_at(*t, pattern(2048, 0, 4), 1024), 2048);
  ASSERT_EQ(write_at(*t, pattern(5000, 0, 5), 20000), 5000);
  ASSERT_EQ(write_at(*t, pattern(100, 0, 6), 21000), 100);
  EXPECT_EQ(t->unflushed_writes(), 3u);
  t->cut(make_cut(power_cut::drop_all, 1));
  EXPECT_TRUE(t->dead());
  EXPECT_EQ(t->unflushed_writes(), 0u);
  EXPECT_EQ(t->durable_image(), expect) << "exactly the flushed writes, byte for byte";
  t->revive();
  EXPECT_FALSE(t->dead());
  EXPECT_EQ(read_all(*t), expect) << "powered on, reads see the medium";
}

// A random mix of FUA and plain writes with flushes in between: after
// drop_all the medium is exactly the last flush's contents with the later
// FUA writes applied in order.
TEST(CrashTarget, DropAllKeepsExactlyTheFlushedAndFuaWrites) {
  for (uint64_t round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const bytes_t image = pattern(16384, 0, round);
    auto t = make_volatile_cache_target(image);
    bytes_t durable = image;
    std::mt19937_64 rng(round);
    const int n = 60;
    for (int i = 0; i < n; ++i) {
      const uint64_t len = 1 + rng() % 2000, off = rng() % (16384 - len);
      const bytes_t data = pattern(len, off, 1000 * round + i + 1);
      const bool fua = rng() % 3 == 0;
      ASSERT_EQ(write_at(*t, data, off, fua), int64_t(len));
      if (fua) put(durable, data, off);
      if (rng() % 15 == 0) {
        ASSERT_EQ(flush(*t), 0);
        durable = read_all(*t);
      }
    }
    t->cut(make_cut(power_cut::drop_all, round));
    ASSERT_EQ(t->durable_image(), durable);
  }
}

TEST(CrashTarget, FuaWritesSurviveDropAll) {
  auto t = make_volatile_cache_target(8192);
  bytes_t expect(8192, 0);
  ASSERT_EQ(write_at(*t, filled(1024, 0x11), 0, /*fua=*/true), 1024);
  put(expect, filled(1024, 0x11), 0);
  EXPECT_EQ(t->unflushed_writes(), 0u) << "a FUA write is durable when it completes";
  EXPECT_EQ(t->durable_image(), expect);
  // A later plain write over it sits above it, and is lost.
  ASSERT_EQ(write_at(*t, filled(512, 0x22), 256), 512);
  ASSERT_EQ(write_at(*t, filled(512, 0x33), 4096), 512);
  bytes_t seen = expect;
  put(seen, filled(512, 0x22), 256);
  put(seen, filled(512, 0x33), 4096);
  EXPECT_EQ(read_all(*t), seen);
  EXPECT_EQ(t->unflushed_writes(), 2u);
  t->cut(make_cut(power_cut::drop_all, 1));
  EXPECT_EQ(t->durable_image(), expect);
  EXPECT_EQ(t->flushes(), 0u);
}

// A FUA write supersedes what earlier unflushed writes hold under it: their
// older bytes there may not land over it, even when a cut keeps them.
TEST(CrashTarget, FuaSupersedesEarlierUnflushedBytes) {
  for (auto mode : {power_cut::keep_random, power_cut::torn}) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      auto t = make_volatile_cache_target(4096);
      ASSERT_EQ(write_at(*t, filled(2048, 0x11), 0), 2048);
      ASSERT_EQ(write_at(*t, filled(512, 0x22), 512, /*fua=*/true), 512);
      ASSERT_EQ(write_at(*t, filled(512, 0x44), 3072), 512);
      ASSERT_EQ(write_at(*t, filled(256, 0x55), 3072, /*fua=*/true), 256);
      ASSERT_EQ(write_at(*t, filled(256, 0x66), 3328, /*fua=*/true), 256);  // 0x44's last live bytes
      EXPECT_EQ(t->unflushed_writes(), 1u) << "a write superseded whole leaves the cache";
      t->cut(make_cut(mode, seed, 1.0));
      const bytes_t d = t->durable_image();
      for (size_t i = 512; i < 1024; ++i) ASSERT_EQ(d[i], 0x22) << "byte " << i << ", seed " << seed;
      for (size_t i = 3072; i < 3328; ++i) ASSERT_EQ(d[i], 0x55) << "byte " << i;
      for (size_t i = 3328; i < 3584; ++i) ASSERT_EQ(d[i], 0x66) << "byte " << i;
      if (mode == power_cut::keep_random) {  // kept whole: the rest of 0x11 is there
        for (size_t i = 0; i < 2048; ++i)
          if (i < 512 || i >= 1024) ASSERT_EQ(d[i], 0x11) << "byte " << i;
      }
    }
  }
}

// Non-overlapping writes, some not sector-aligned: each lands whole or not
// at all, the share kept follows keep_fraction, and 0 and 1 mean none and all.
TEST(CrashTarget, KeepRandomKeepsWholeWritesOnly) {
  const uint64_t n = 16, stride = 4096;
  const bytes_t image = pattern(n * stride, 0, 77);
  std::vector<write_op> ops;
  for (uint64_t i = 0; i < n; ++i) ops.push_back({i * stride + (i % 3) * 100, pattern(2500, 0, 1000 + i)});
  auto run = [&](const power_cut& how) {
    auto t = make_volatile_cache_target(image);
    for (const auto& w : ops) EXPECT_EQ(write_at(*t, w.data, w.offset), int64_t(w.data.size()));
    t->cut(how);
    return t->durable_image();
  };
  // How many writes landed; fails the test if one landed in part.
  auto kept_writes = [&](const bytes_t& d) {
    uint64_t kept = 0;
    for (const auto& w : ops) {
      const bool is_new = std::equal(w.data.begin(), w.data.end(), d.begin() + w.offset);
      const bool is_old = std::equal(image.begin() + w.offset, image.begin() + w.offset + w.data.size(),
                                     d.begin() + w.offset);
      EXPECT_TRUE(is_new || is_old) << "write at " << w.offset << " landed in part";
      kept += is_new;
    }
    // Nothing outside the writes changed.
    bytes_t rebuilt = image;
    for (const auto& w : ops)
      std::copy(d.begin() + w.offset, d.begin() + w.offset + w.data.size(), rebuilt.begin() + w.offset);
    EXPECT_EQ(rebuilt, d);
    return kept;
  };
  uint64_t total = 0, some = 0;
  const uint64_t seeds = 200;
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    const uint64_t k = kept_writes(run(make_cut(power_cut::keep_random, seed, 0.5)));
    if (HasFailure()) return;
    total += k;
    some += (k > 0 && k < n);
  }
  const double share = double(total) / double(seeds * n);
  EXPECT_GT(share, 0.4);
  EXPECT_LT(share, 0.6);
  EXPECT_GT(some, seeds / 2) << "most cuts should keep some writes and lose others";
  EXPECT_EQ(kept_writes(run(make_cut(power_cut::keep_random, 3, 0.0))), 0u);
  EXPECT_EQ(kept_writes(run(make_cut(power_cut::keep_random, 3, 1.0))), n);
  uint64_t total_low = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) total_low += kept_writes(run(make_cut(power_cut::keep_random, seed, 0.1)));
  EXPECT_LT(double(total_low) / double(50 * n), 0.2);
}

// Unaligned writes over 512-byte sectors: every piece of a write between
// sector boundaries lands whole or not at all, and some writes do tear.
TEST(CrashTarget, TornKeepsSectorPiecesOnly) {
  const uint32_t sector = 512;
  const uint64_t n = 8, stride = 4096;
  const bytes_t image = pattern(n * stride, 0, 78);
  std::vector<write_op> ops;
  for (uint64_t i = 0; i < n; ++i) ops.push_back({i * stride + 300, pattern(2500, 0, 2000 + i)});
  uint64_t torn = 0, whole = 0, lost = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    auto t = make_volatile_cache_target(image, sector);
    for (const auto& w : ops) ASSERT_EQ(write_at(*t, w.data, w.offset), int64_t(w.data.size()));
    t->cut(make_cut(power_cut::torn, seed, 0.75));
    const bytes_t d = t->durable_image();
    for (const auto& w : ops) {
      uint64_t landed = 0, pieces = 0;
      for (uint64_t pos = w.offset; pos < w.offset + w.data.size();) {
        const uint64_t end = std::min<uint64_t>(w.offset + w.data.size(), (pos / sector + 1) * sector);
        const bool is_new = std::equal(d.begin() + pos, d.begin() + end, w.data.begin() + (pos - w.offset));
        const bool is_old = std::equal(d.begin() + pos, d.begin() + end, image.begin() + pos);
        ASSERT_TRUE(is_new || is_old) << "sector piece [" << pos << ", " << end << ") landed in part, seed " << seed;
        landed += is_new;
        ++pieces;
        pos = end;
      }
      ASSERT_EQ(pieces, 6u);
      if (landed == pieces)
        ++whole;
      else if (landed == 0)
        ++lost;
      else
        ++torn;
    }
    bytes_t rebuilt = image;
    for (const auto& w : ops)
      std::copy(d.begin() + w.offset, d.begin() + w.offset + w.data.size(), rebuilt.begin() + w.offset);
    ASSERT_EQ(rebuilt, d) << "bytes outside every write changed";
  }
  EXPECT_GT(torn, 100u) << "torn mode should tear writes";
  EXPECT_GT(whole, 100u) << "torn mode should land some writes whole";
  EXPECT_GT(lost, 50u);
}

// Overlapping writes: the medium is the image after some sequence of
// distinct writes from the cache, in some order; and orders other than the
// arrival order do occur.
TEST(CrashTarget, ReorderedOverlappingWritesAreSomeOrderOfASubset) {
  const std::vector<write_op> ops = {
      {0, filled(1024, 1)}, {512, filled(1024, 2)}, {1024, filled(1024, 3)}, {256, filled(1536, 4)}};
  const bytes_t image(2048, 0);
  auto apply = [&](const std::vector<size_t>& order) {
    bytes_t d = image;
    for (size_t i : order) put(d, ops[i].data, ops[i].offset);
    return d;
  };
  std::set<bytes_t> any_order, arrival_order;
  // Every ordered subset: grow sequences one distinct write at a time.
  std::vector<std::vector<size_t>> frontier = {{}};
  while (!frontier.empty()) {
    std::vector<std::vector<size_t>> next;
    for (const auto& seq : frontier) {
      any_order.insert(apply(seq));
      if (std::is_sorted(seq.begin(), seq.end())) arrival_order.insert(apply(seq));
      for (size_t i = 0; i < ops.size(); ++i)
        if (std::find(seq.begin(), seq.end(), i) == seq.end()) {
          next.push_back(seq);
          next.back().push_back(i);
        }
    }
    frontier = std::move(next);
  }
  ASSERT_GT(any_order.size(), arrival_order.size());  // the test can tell them apart
  uint64_t reordered = 0;
  std::set<bytes_t> seen;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    auto t = make_volatile_cache_target(image);
    for (const auto& w : ops) ASSERT_EQ(write_at(*t, w.data, w.offset), int64_t(w.data.size()));
    t->cut(make_cut(power_cut::keep_random, seed, 0.75));
    const bytes_t d = t->durable_image();
    ASSERT_TRUE(any_order.count(d)) << "seed " << seed << ": no order of a subset of the writes explains the medium";
    reordered += arrival_order.count(d) == 0;
    seen.insert(d);
  }
  EXPECT_GT(reordered, 10u) << "writes should land out of arrival order";
  EXPECT_GT(seen.size(), arrival_order.size()) << "cuts should reach many different outcomes";
}

TEST(CrashTarget, DeadTargetFailsEverythingUntilRevive) {
  const bytes_t image = pattern(8192, 0, 9);
  auto t = make_volatile_cache_target(image);
  ASSERT_EQ(write_at(*t, filled(512, 0x77), 0), 512);
  ASSERT_EQ(flush(*t), 0);
  EXPECT_EQ(t->requests(), 2u);
  t->cut(make_cut(power_cut::keep_random, 1));
  ASSERT_TRUE(t->dead());
  bytes_t buf(512, 0xAB);
  EXPECT_EQ(read_at(*t, buf, 0), -EIO);
  EXPECT_EQ(buf, bytes_t(512, 0xAB)) << "a failed read leaves the buffer alone";
  EXPECT_EQ(write_at(*t, filled(512, 0x88), 512), -EIO);
  EXPECT_EQ(write_at(*t, filled(512, 0x88), 1024, /*fua=*/true), -EIO);
  EXPECT_EQ(flush(*t), -EIO);
  EXPECT_EQ(t->unflushed_writes(), 0u);
  EXPECT_EQ(t->flushes(), 1u);
  EXPECT_EQ(t->requests(), 2u) << "a dead disk sees no requests";
  bytes_t expect = image;
  put(expect, filled(512, 0x77), 0);
  EXPECT_EQ(t->durable_image(), expect) << "refused writes changed the medium";
  t->cut(make_cut(power_cut::drop_all, 1));  // a second cut does nothing
  EXPECT_TRUE(t->dead());

  t->revive();
  EXPECT_FALSE(t->dead());
  EXPECT_EQ(read_all(*t), expect);
  ASSERT_EQ(write_at(*t, filled(512, 0x99), 512), 512);
  ASSERT_EQ(flush(*t), 0);
  put(expect, filled(512, 0x99), 512);
  EXPECT_EQ(t->durable_image(), expect);
  EXPECT_EQ(t->flushes(), 2u);
  EXPECT_EQ(t->requests(), 4u);
  t->revive();  // on a live disk: nothing
  EXPECT_EQ(read_all(*t), expect);
}

// A workload of 7 writes and flushes (and reads, which do not count), cut
// before each of them in turn: the requests before the cut succeed, the
// one it names and all after fail, and the medium holds what the flushes
// before it made durable.
TEST(CrashTarget, CutAtRequestCutsExactlyBeforeTheNthWriteOrFlush) {
  const bytes_t image = pattern(8192, 0, 4);
  // Request i's data (writes) lands at block i.
  const std::vector<bool> is_flush = {false, true, false, false, true, false, true};
  for (uint64_t k = 1; k <= is_flush.size() + 1; ++k) {
    SCOPED_TRACE("cut at request " + std::to_string(k));
    auto t = make_volatile_cache_target(image);
    t->cut_at_request(k, make_cut(power_cut::drop_all, 1));
    bytes_t durable = image, seen = image;
    for (size_t i = 0; i < is_flush.size(); ++i) {
      bytes_t buf(512);
      EXPECT_EQ(read_at(*t, buf, 0), i < k ? 512 : -EIO) << "a read before request " << i + 1;
      const bool performed = i + 1 < k;
      if (is_flush[i]) {
        EXPECT_EQ(flush(*t), performed ? 0 : -EIO) << "request " << i + 1;
        if (performed) durable = seen;
      } else {
        const bytes_t data = filled(512, uint8_t(i + 1));
        EXPECT_EQ(write_at(*t, data, i * 512), performed ? 512 : -EIO) << "request " << i + 1;
        if (performed) put(seen, data, i * 512);
      }
      EXPECT_EQ(t->dead(), !performed);
    }
    EXPECT_EQ(t->requests(), std::min<uint64_t>(k, is_flush.size()));
    EXPECT_EQ(t->durable_image(), durable);
  }

  // Counted from the arming; 0 disarms; a cut disarms; arming again replaces.
  auto t = make_volatile_cache_target(image);
  ASSERT_EQ(write_at(*t, filled(10, 1), 0), 10);
  t->cut_at_request(2, make_cut(power_cut::drop_all, 1));
  ASSERT_EQ(write_at(*t, filled(10, 1), 0), 10);
  EXPECT_EQ(flush(*t), -EIO);
  EXPECT_TRUE(t->dead());
  t->revive();
  for (int i = 0; i < 5; ++i) ASSERT_EQ(flush(*t), 0) << "the cut was spent";
  t->cut_at_request(2, make_cut(power_cut::drop_all, 1));
  t->cut_at_request(0, make_cut(power_cut::drop_all, 1));
  for (int i = 0; i < 5; ++i) ASSERT_EQ(flush(*t), 0) << "disarmed";
  t->cut_at_request(3, make_cut(power_cut::drop_all, 1));
  t->cut(make_cut(power_cut::drop_all, 1));
  t->revive();
  for (int i = 0; i < 5; ++i) ASSERT_EQ(flush(*t), 0) << "a cut disarms";
  t->cut_at_request(5, make_cut(power_cut::drop_all, 1));
  t->cut_at_request(1, make_cut(power_cut::drop_all, 1));
  EXPECT_EQ(flush(*t), -EIO) << "arming again replaces";

  // The armed cut applies its own mode: keep everything.
  auto u = make_volatile_cache_target(image);
  u->cut_at_request(3, make_cut(power_cut::keep_random, 1, 1.0));
  ASSERT_EQ(write_at(*u, filled(512, 0x42), 0), 512);
  ASSERT_EQ(write_at(*u, filled(512, 0x43), 4096), 512);
  EXPECT_EQ(write_at(*u, filled(512, 0x44), 1024), -EIO);
  bytes_t expect = image;
  put(expect, filled(512, 0x42), 0);
  put(expect, filled(512, 0x43), 4096);
  EXPECT_EQ(u->durable_image(), expect);
}

TEST(CrashTarget, EqualSeedsGiveEqualImages) {
  std::vector<write_op> ops;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 40; ++i) {
    const uint64_t len = 1 + rng() % 3000, off = rng() % (32768 - len);
    ops.push_back({off, pattern(len, off, 300 + i)});
  }
  auto run = [&](const power_cut& how) {
    auto t = make_volatile_cache_target(32768);
    for (const auto& w : ops) EXPECT_EQ(write_at(*t, w.data, w.offset), int64_t(w.data.size()));
    t->cut(how);
    return t->durable_image();
  };
  for (auto mode : {power_cut::keep_random, power_cut::torn}) {
    std::set<bytes_t> distinct;
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      const bytes_t a = run(make_cut(mode, seed, 0.5));
      EXPECT_EQ(a, run(make_cut(mode, seed, 0.5))) << "mode " << mode << ", seed " << seed;
      distinct.insert(a);
    }
    EXPECT_GE(distinct.size(), 6u) << "different seeds should mostly give different images";
  }
}

TEST(CrashTarget, BadCutsAreRefused) {
  auto t = make_volatile_cache_target(4096);
  EXPECT_THROW(t->cut(make_cut(power_cut::keep_random, 1, 1.5)), error);
  EXPECT_THROW(t->cut(make_cut(power_cut::torn, 1, -0.1)), error);
  EXPECT_THROW(t->cut(make_cut(power_cut::torn, 1, std::nan(""))), error);
  EXPECT_THROW(t->cut(make_cut(power_cut::mode_t(7), 1)), error);
  EXPECT_THROW(t->cut_at_request(1, make_cut(power_cut::keep_random, 1, 2.0)), error);
  EXPECT_FALSE(t->dead());
  EXPECT_EQ(flush(*t), 0) << "a refused arm arms nothing";
}

// ---- through the controller ----

namespace {

class CrashTargetController : public test::backend_param_test {};
using test::backend_label;

}  // namespace

TEST_P(CrashTargetController, WriteFlushCutThroughAClient) {
  const uint32_t bs = 512;
  const bytes_t image = pattern(65536, 0, 3);
  auto disk = make_volatile_cache_target(image, bs);
  controller ctl(config());
  const uint32_t ns = ctl.add_namespace({disk, bs, false});
  host_queue_client c(ctl.create_queue_pair({16, 16, 8192}));
  bytes_t expect = image;

  const bytes_t a = pattern(4 * bs, 0, 11);
  ASSERT_TRUE(c.write(ns, 0, 4, bs, a.data()).ok());
  ASSERT_TRUE(c.flush(ns).ok());
  put(expect, a, 0);
  EXPECT_EQ(disk->flushes(), 1u);
  EXPECT_EQ(disk->durable_image(), expect);

  const bytes_t b = pattern(2 * bs, 0, 12);
  ASSERT_TRUE(c.write(ns, 8, 2, bs, b.data()).ok());
  const bytes_t f = pattern(2 * bs, 0, 13);  // FUA, through a raw command
  nvme::command w = nvme::make_write(ns, 16, 2, 0);
  w.cdw12 |= nvme::cdw12_fua;
  const wait_result fr = c.raw(w, false, f.data(), f.size());
  ASSERT_TRUE(fr.status.ok()) << describe(fr.status);
  put(expect, f, 16 * bs);
  const bytes_t g = pattern(2 * bs, 0, 14);  // over the FUA write's second block
  ASSERT_TRUE(c.write(ns, 17, 2, bs, g.data()).ok());
  EXPECT_EQ(disk->unflushed_writes(), 2u);
  EXPECT_EQ(disk->requests(), 5u);

  bytes_t back(2 * bs);
  ASSERT_TRUE(c.read(ns, 8, 2, bs, back.data()).ok());
  EXPECT_EQ(back, b) << "reads see the cache";
  ASSERT_TRUE(c.read(ns, 17, 2, bs, back.data()).ok());
  EXPECT_EQ(back, g);

  disk->cut(make_cut(power_cut::drop_all, 1));
  EXPECT_EQ(disk->durable_image(), expect) << "the flushed write and the FUA write, nothing else";
  EXPECT_EQ(c.read(ns, 0, 1, bs, back.data()).nvme, sc::unrecovered_read_error);
  EXPECT_EQ(c.write(ns, 0, 1, bs, back.data()).nvme, sc::write_fault);
  EXPECT_EQ(c.flush(ns).nvme, sc::write_fault);

  disk->revive();
  ASSERT_TRUE(c.read(ns, 16, 2, bs, back.data()).ok());
  EXPECT_EQ(back, f);
  ASSERT_TRUE(c.read(ns, 8, 2, bs, back.data()).ok());
  EXPECT_TRUE(std::equal(back.begin(), back.end(), image.begin() + 8 * bs)) << "the unflushed write is gone";
  ASSERT_TRUE(c.write(ns, 8, 2, bs, b.data()).ok());
  ASSERT_TRUE(c.flush(ns).ok());
  put(expect, b, 8 * bs);
  EXPECT_EQ(disk->durable_image(), expect);
}

// An armed cut in the middle of a client's stream of requests.
TEST_P(CrashTargetController, ArmedCutStopsTheClientsNthRequest) {
  const uint32_t bs = 4096;
  auto disk = make_volatile_cache_target(64 * bs, 512);
  controller ctl(config());
  const uint32_t ns = ctl.add_namespace({disk, bs, false});
  host_queue_client c(ctl.create_queue_pair({16, 16, bs}));
  disk->cut_at_request(4, make_cut(power_cut::drop_all, 1));
  bytes_t expect(64 * bs, 0);
  const bytes_t a = filled(bs, 0xA1), b = filled(bs, 0xB2);
  ASSERT_TRUE(c.write(ns, 1, 1, bs, a.data()).ok());  // 1
  ASSERT_TRUE(c.flush(ns).ok());                       // 2
  put(expect, a, bs);
  ASSERT_TRUE(c.write(ns, 2, 1, bs, b.data()).ok());  // 3
  EXPECT_EQ(c.flush(ns).nvme, sc::write_fault);        // 4: the cut
  EXPECT_TRUE(disk->dead());
  EXPECT_EQ(disk->durable_image(), expect);
}

// Several clients on several pollers at once (the target's lock): phase one
// writes and flushes, phase two writes without flushing; drop_all leaves
// exactly phase one.
TEST_P(CrashTargetController, ConcurrentClientsThenDropAll) {
  const uint32_t bs = 512;
  const unsigned threads = 4;
  const uint64_t blocks_per_thread = 64;
  auto disk = make_volatile_cache_target(threads * blocks_per_thread * bs, bs);
  controller ctl(config(2));
  const uint32_t ns = ctl.add_namespace({disk, bs, false});
  std::vector<std::unique_ptr<host_queue_client>> clients;
  for (unsigned i = 0; i < threads; ++i)
    clients.push_back(std::make_unique<host_queue_client>(ctl.create_queue_pair({16, 16, 8 * bs})));
  std::latch flushed(threads);
  std::atomic<unsigned> failures{0};
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      const host_queue_client& c = *clients[i];
      const uint64_t first = i * blocks_per_thread;
      for (uint64_t lba = first; lba < first + blocks_per_thread; lba += 2) {
        const bytes_t d = pattern(2 * bs, lba * bs, 1);
        if (!c.write(ns, lba, 2, bs, d.data()).ok()) ++failures;
      }
      if (!c.flush(ns).ok()) ++failures;
      flushed.arrive_and_wait();
      for (uint64_t lba = first; lba < first + blocks_per_thread; lba += 4) {
        const bytes_t d = pattern(3 * bs, lba * bs, 2);
        if (!c.write(ns, lba, 3, bs, d.data()).ok()) ++failures;
        bytes_t back(3 * bs);
        if (!c.read(ns, lba, 3, bs, back.data()).ok() || back != d) ++failures;
      }
    });
  }
  for (auto& t : pool) t.join();
  ASSERT_EQ(failures.load(), 0u);
  EXPECT_EQ(disk->unflushed_writes(), threads * blocks_per_thread / 4);
  disk->cut(make_cut(power_cut::drop_all, 1));
  EXPECT_EQ(disk->durable_image(), pattern(threads * blocks_per_thread * bs, 0, 1));
}

INSTANTIATE_TEST_SUITE_P(Backends, CrashTargetController, ::testing::Values(io_backend::uring, io_backend::threads),
                         backend_label);
