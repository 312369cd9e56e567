// The server's shared host-memory tier (host_tier.hpp) under a controller:
// a second read of a page comes from host memory, writes go through and are
// never hidden by an older copy, and eviction keeps whatever is read right.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "cache_test_support.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/link/controller_link.hpp"
#include "deepwell/link/host_client.hpp"
#include "deepwell/views/array.hpp"
#include "targets/host_tier.hpp"
#include "deepwell/protocol/tier_layout.hpp"
#include "test_util.hpp"

using namespace deepwell;

namespace {

// Storage that counts the requests reaching it (a 1 ns delay rule fires on each).
std::shared_ptr<fault_target> counted(uint64_t bytes, uint64_t seed) {
  auto t = make_fault_target(test::pattern_memory(bytes, true, seed));
  t->add_rule({fault_rule::delay, 0, UINT64_MAX, 0, 1, 0});
  return t;
}

}  // namespace

TEST(HostTier, ASecondReadComesFromHostMemoryAndWritesGoThrough) {
  auto tier = host_tier::make(64 * 4096);
  auto storage = counted(1 << 20, 21);
  controller ctl;
  const uint32_t ns = ctl.add_namespace({tier->wrap(storage), 4096, false});
  host_queue_client a(ctl.create_queue_pair({16, 16, 8192}));
  host_queue_client b(ctl.create_queue_pair({16, 16, 8192}));
  std::vector<uint8_t> x(8192), y(8192);
  ASSERT_TRUE(a.read(ns, 4, 2, 4096, x.data()).ok());
  EXPECT_EQ(test::check_pattern(x.data(), 8192, 4 * 4096, 21), -1);
  EXPECT_EQ(storage->fired(), 1u);
  ASSERT_TRUE(b.read(ns, 4, 2, 4096, y.data()).ok());  // another client: from the tier
  EXPECT_EQ(x, y);
  EXPECT_EQ(storage->fired(), 1u) << "the second read did not reach storage";
  ASSERT_TRUE(b.read(ns, 5, 1, 4096, y.data()).ok());  // a page inside the first read
  EXPECT_EQ(storage->fired(), 1u);
  host_tier_stats s = tier->stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.resident_pages, 2u);
  // A write goes to storage and the next read sees it.
  std::vector<uint8_t> w(4096, 0x3C);
  ASSERT_TRUE(a.write(ns, 5, 1, 4096, w.data()).ok());
  EXPECT_EQ(storage->fired(), 2u);
  ASSERT_TRUE(b.read(ns, 5, 1, 4096, y.data()).ok());
  EXPECT_EQ(std::vector<uint8_t>(y.begin(), y.begin() + 4096), w);
  ASSERT_TRUE(b.read(ns, 4, 1, 4096, y.data()).ok());
  EXPECT_EQ(test::check_pattern(y.data(), 4096, 4 * 4096, 21), -1) << "the page beside the write is unchanged";
  EXPECT_GE(tier->stats().invalidations, 1u);
}

TEST(HostTier, ConcurrentWritersAlwaysReadTheirLastWriteUnderEviction) {
  // 8 pages of tier over 128 blocks, two pollers: reads install pages while
  // writes to them are in flight on the other poller; a read that began
  // before a write must never leave its older bytes in the tier.
  auto tier = host_tier::make(8 * 4096);
  controller_config cc;
  cc.pollers = 2;
  controller ctl(cc);
  // Storage that takes 50 us a request: a read issued before a write on
  // the other poller gets the old bytes while the write is in flight.
  // A file, not host memory: the reads and writes that overlap on purpose
  // here are the kernel's to order (host memory would make them a data race
  // in this process, which ThreadSanitizer rightly reports).
  test::scratch_file file(128 * 4096, 1);
  file_options fo;
  fo.writable = true;
  auto storage = make_fault_target(open_file_target(file.path(), fo));
  storage->add_rule({fault_rule::delay, 0, UINT64_MAX, 0, 50'000, 0});
  const uint32_t ns = ctl.add_namespace({tier->wrap(storage), 4096, false});
  std::vector<std::unique_ptr<host_queue_client>> qs;
  for (int i = 0; i < 4; ++i) qs.push_back(std::make_unique<host_queue_client>(ctl.create_queue_pair({32, 32, 4096})));
  std::atomic<uint64_t> failures{0}, checks{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<uint64_t> mine(32, 0);  // version of each of my blocks (blocks t, t+4, ...)
      std::vector<uint64_t> buf(512), back(512);
      for (int i = 0; i < 2000; ++i) {
        const uint64_t k = rng() % 32, block = k * 4 + t;
        // Another thread's block (t+1's), read to churn the tier and race its writes.
        const uint64_t other = (rng() % 32) * 4 + (t + 1) % 4;
        if (!qs[t]->read(ns, other, 1, 4096, back.data()).ok()) ++failures;
        if (rng() % 2) {
          ++mine[k];
          for (auto& v : buf) v = block << 32 | mine[k];
          if (!qs[t]->write(ns, block, 1, 4096, buf.data()).ok()) ++failures;
        }
        if (!qs[t]->read(ns, block, 1, 4096, back.data()).ok()) ++failures;
        if (mine[k] == 0) {
          if (test::check_pattern(back.data(), 4096, block * 4096, 1) != -1) ++failures;
        } else {
          for (uint64_t v : back)
            if (v != (block << 32 | mine[k])) {
              ++failures;
              break;
            }
        }
        ++checks;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0u) << "of " << checks.load() << " reads";
  const host_tier_stats s = tier->stats();
  EXPECT_GT(s.hits, 0u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_LE(s.resident_pages, 8u);
}

TEST(HostTier, ACacheCopiesResidentPagesStraightFromTheArena) {
  auto tier = host_tier::make(64 * 4096);
  auto storage = counted(64 * 4096, 41);
  auto ctl = std::make_shared<controller>();
  const uint32_t ns = ctl->add_namespace({tier->wrap(storage), 4096, false});
  auto link = in_process_link(ctl);
  cache_config cfg = test::small_cache(32);
  cfg.direct_tier = false;
  {
    array<uint64_t> first(make_host_page_cache(link, cfg), ns);  // through the controller: installs every page
    for (uint64_t i = 0; i < first.size(); i += 512) ASSERT_EQ(first.ref()[i], test::pattern_word(i * 8, 41));
  }
  const uint64_t fired = storage->fired();
  const host_tier_stats before = tier->stats();
  EXPECT_EQ(before.resident_pages, 64u);
  cfg.direct_tier = true;
  array<uint64_t> second(make_host_page_cache(link, cfg), ns);
  for (uint64_t i = 0; i < second.size(); ++i) ASSERT_EQ(second.ref()[i], test::pattern_word(i * 8, 41)) << i;
  EXPECT_EQ(storage->fired(), fired) << "nothing reached storage";
  const host_tier_stats after = tier->stats();
  EXPECT_EQ(after.hits, before.hits) << "no command reached the tier either: the cache copied the frames itself";
  EXPECT_EQ(after.misses, before.misses);
  const cache_stats cs = second.cache().stats();
  EXPECT_EQ(cs.tier_fills, 64u);
  EXPECT_EQ(cs.misses, 64u);
  // A write drops its page from the arena: a cache made after it reads
  // the new bytes (through the controller), and the page beside it from the arena.
  host_queue_client q(ctl->create_queue_pair({16, 16, 4096}));
  std::vector<uint64_t> w(512, 0x3C3C3C3C3C3C3C3Cull);
  ASSERT_TRUE(q.write(ns, 5, 1, 4096, w.data()).ok());
  array<uint64_t> third(make_host_page_cache(link, cfg), ns);
  EXPECT_EQ(third.ref()[5 * 512 + 7], 0x3C3C3C3C3C3C3C3Cull);
  EXPECT_EQ(third.ref()[4 * 512 + 7], test::pattern_word((4 * 512 + 7) * 8, 41));
  EXPECT_EQ(third.cache().stats().tier_fills, 1u) << "page 5 came from storage, page 4 from the arena";
}

// A reader's view of a target's arena, as page_cache::tier_source makes it.
static tier_ref view_of(const host_mapping& m) {
  const auto* h = static_cast<const tier_header*>(m.base);
  const auto* b = static_cast<const uint8_t*>(m.base);
  tier_ref t;
  t.index = reinterpret_cast<const uint32_t*>(b + h->index_offset);
  t.seq = reinterpret_cast<const uint64_t*>(b + h->seq_offset);
  t.data = b + h->data_offset;
  t.pages = h->pages;
  t.frames = uint32_t(h->frames);
  t.page_shift = 12;
  return t;
}

TEST(HostTier, AFrameTheServerReusesOrDropsFailsItsReadersCheck) {
  auto tier = host_tier::make(4096);  // one frame
  auto data = tier->wrap(counted(8 * 4096, 5));
  controller ctl;
  const uint32_t ns = ctl.add_namespace({data, 4096, false});
  host_queue_client q(ctl.create_queue_pair({16, 16, 4096}));
  std::vector<uint8_t> buf(4096);
  auto m = data->map_tier();
  ASSERT_TRUE(m);
  const auto* h = static_cast<const tier_header*>(m->base);
  EXPECT_EQ(h->magic, tier_magic);
  EXPECT_EQ(h->pages, 8u);
  EXPECT_EQ(h->frames, 1u);
  const tier_ref t = view_of(*m);
  uint32_t f;
  uint64_t v;
  EXPECT_FALSE(t.begin(2, f, v)) << "nothing resident yet";
  ASSERT_TRUE(q.read(ns, 2, 1, 4096, buf.data()).ok());
  ASSERT_TRUE(t.begin(2, f, v));
  EXPECT_EQ(std::memcmp(t.frame_data(f), buf.data(), 4096), 0);
  EXPECT_TRUE(t.still(f, v));
  // Page 3 takes the only frame: a copy of page 2 begun before must not be kept.
  ASSERT_TRUE(q.read(ns, 3, 1, 4096, buf.data()).ok());
  EXPECT_FALSE(t.still(f, v));
  EXPECT_FALSE(t.begin(2, f, v));
  ASSERT_TRUE(t.begin(3, f, v));
  EXPECT_EQ(std::memcmp(t.frame_data(f), buf.data(), 4096), 0);
  // A write drops its page: the frame's readers fail their check too.
  std::vector<uint8_t> w(4096, 0x5A);
  ASSERT_TRUE(q.write(ns, 3, 1, 4096, w.data()).ok());
  EXPECT_FALSE(t.still(f, v));
  EXPECT_FALSE(t.begin(3, f, v));
  EXPECT_FALSE(t.begin(99, f, v)) << "a page past the dataset";
}

TEST(HostTier, ArenaReadersNeverKeepAPageTheServerChangedUnderThem) {
  // 16 frames over 64 pages: threads reading through the controller churn
  // the arena (installs evict, so frames are reused for other pages) and
  // writers drop pages, while readers with caches of their own copy pages
  // straight from the arena. Every page is written whole, with its number
  // and a version in each word: a reader that kept a copy the server
  // changed meanwhile would see two pages, or two versions, in one.
  // Readers read only the pages nobody writes: a read racing a write may
  // see a mix of the two (storage gives no atomicity), tier or no tier.
  constexpr uint64_t pages = 64, written_from = 48;
  auto tier = host_tier::make(16 * 4096);
  controller_config cc;
  cc.pollers = 2;
  auto ctl = std::make_shared<controller>(cc);
  test::scratch_file file(pages * 4096, 3);
  file_options fo;
  fo.writable = true;
  const uint32_t ns = ctl->add_namespace({tier->wrap(open_file_target(file.path(), fo)), 4096, false});
  auto page_words = [](uint64_t p, uint64_t version) { return std::vector<uint64_t>(512, p << 32 | version); };
  {
    host_queue_client q(ctl->create_queue_pair({16, 16, 4096}));
    for (uint64_t p = 0; p < pages; ++p) ASSERT_TRUE(q.write(ns, p, 1, 4096, page_words(p, 0).data()).ok());
  }
  auto link = in_process_link(ctl);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> failures{0}, torn{0}, tier_fills{0}, tier_retries{0};
  std::vector<std::thread> churn, readers;
  for (unsigned t = 0; t < 2; ++t)
    churn.emplace_back([&, t] {
      host_queue_client q(ctl->create_queue_pair({16, 16, 4096}));
      std::mt19937_64 rng(100 + t);
      std::vector<uint64_t> buf(512);
      std::vector<uint64_t> version(pages, 0);
      while (!done.load()) {
        const uint64_t p = rng() % pages;
        if (p >= written_from && rng() % 4 == 0 && p % 2 == t) {  // each writer owns half of those pages
          if (!q.write(ns, p, 1, 4096, page_words(p, ++version[p]).data()).ok()) ++failures;
        } else if (!q.read(ns, p, 1, 4096, buf.data()).ok()) {
          ++failures;
        }
      }
    });
  for (unsigned t = 0; t < 3; ++t)
    readers.emplace_back([&, t] {
      cache_config cfg = test::small_cache(32);
      cfg.queue_pairs = 1;
      array<uint64_t> a(make_host_page_cache(link, cfg), ns);
      std::mt19937_64 rng(7 + t);
      std::vector<uint64_t> got(512);
      for (int i = 0; i < 10000; ++i) {
        const uint64_t p = rng() % written_from;
        if (!a.ref().read_range(got.data(), p * 512, 512).ok()) {
          ++failures;
          continue;
        }
        if (got[0] != p << 32) ++torn;
        for (uint64_t v : got)
          if (v != got[0]) {
            ++torn;
            break;
          }
      }
      const cache_stats cs = a.cache().stats();
      tier_fills += cs.tier_fills;
      tier_retries += cs.tier_retries;
    });
  for (auto& th : readers) th.join();
  done = true;
  for (auto& th : churn) th.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(torn.load(), 0u) << "pages that were not one page at one version";
  EXPECT_GT(tier_fills.load(), 0u) << "the readers never copied from the arena: the test tested nothing";
  RecordProperty("tier_fills", std::to_string(tier_fills.load()));
  RecordProperty("tier_retries", std::to_string(tier_retries.load()));
  EXPECT_GT(tier->stats().evictions, 0u);
}

TEST(HostTier, BadSizesAreRefused) {
  EXPECT_THROW(host_tier::make(1000), deepwell::error);
  EXPECT_THROW(host_tier::make(1 << 20, 3000), deepwell::error);
  EXPECT_THROW(host_tier::make(1 << 20)->wrap(nullptr), deepwell::error);
}

namespace {

// Storage that, once it has written a read's bytes into the buffer it was
// given, lets `meddle` run before it reports the read done: the client
// rewriting its staging while the server's read of it is in flight.
class meddled_target final : public target {
 public:
  meddled_target(std::shared_ptr<target> inner, std::function<void()> meddle)
      : inner_(std::move(inner)), meddle_(std::move(meddle)) {}
  uint64_t size() const override { return inner_->size(); }
  bool writable() const override { return inner_->writable(); }
  uint32_t io_alignment() const override { return inner_->io_alignment(); }
  uint32_t memory_alignment() const override { return inner_->memory_alignment(); }
  std::string describe() const override { return "meddled " + inner_->describe(); }
  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    inner_->read(io, buf, len, offset, io_callback{&finish, new pending{this, done}});
  }
  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override {
    inner_->write(io, buf, len, offset, fua, done);
  }
  void flush(io_engine& io, io_callback done) override { inner_->flush(io, done); }

 private:
  struct pending {
    meddled_target* t;
    io_callback done;
  };
  static void finish(void* ctx, int64_t result) {
    auto* p = static_cast<pending*>(ctx);
    p->t->meddle_();
    const io_callback done = p->done;
    delete p;
    done(result);
  }
  std::shared_ptr<target> inner_;
  std::function<void()> meddle_;
};

}  // namespace

// The tier holds what storage said, never what a client wrote into its
// staging while the read that filled the tier ran (in server mode the
// read's buffer is the client's).
TEST(HostTier, APageIsInstalledFromTheServersOwnReadNotTheClientsBuffer) {
  auto tier = host_tier::make(16 * 4096);
  std::vector<uint8_t> staging(4096);
  auto storage = std::make_shared<meddled_target>(test::pattern_memory(16 * 4096, true, 51),
                                                  [&] { std::memset(staging.data(), 0xEE, staging.size()); });
  auto t = tier->wrap(storage);
  auto io = make_io_engine(io_backend::threads, 16);
  auto read_into = [&](uint8_t* buf, uint64_t offset) {
    std::atomic<int64_t> result{INT64_MIN};
    t->read(*io, buf, 4096, offset, io_callback{[](void* c, int64_t r) { static_cast<std::atomic<int64_t>*>(c)->store(r); }, &result});
    while (result.load() == INT64_MIN) {
      io->submit();
      io->reap();
    }
    return result.load();
  };
  ASSERT_EQ(read_into(staging.data(), 3 * 4096), 4096);  // a miss: fills the tier
  EXPECT_EQ(tier->stats().resident_pages, 1u);
  std::vector<uint8_t> other(4096);
  ASSERT_EQ(read_into(other.data(), 3 * 4096), 4096);  // a hit
  EXPECT_EQ(tier->stats().hits, 1u);
  EXPECT_EQ(test::check_pattern(other.data(), 4096, 3 * 4096, 51), -1)
      << "another client read the bytes the first one wrote into its staging";
}

// The server never reads back the arena it shares: forged index entries
// and sequence words (what a client that could write the arena would
// write) change nothing the server does.
TEST(HostTier, ForgedArenaMetadataNeitherRedirectsNorCrashesTheServer) {
  auto tier = host_tier::make(8 * 4096);
  auto secret = tier->wrap(test::pattern_memory(8 * 4096, true, 53), 4 * 4096);
  auto mine = tier->wrap(test::pattern_memory(64 * 4096, true, 52), 4 * 4096);
  controller ctl;
  const uint32_t ns = ctl.add_namespace({mine, 4096, true});
  host_queue_client q(ctl.create_queue_pair({16, 16, 4096}));
  std::vector<uint8_t> b(4096);
  for (uint64_t p = 0; p < 4; ++p) ASSERT_TRUE(q.read(ns, p, 1, 4096, b.data()).ok());
  auto m = mine->map_tier();
  ASSERT_TRUE(m);
  auto* h = const_cast<tier_header*>(static_cast<const tier_header*>(m->base));
  auto* base = const_cast<uint8_t*>(static_cast<const uint8_t*>(m->base));
  auto* index = reinterpret_cast<uint32_t*>(base + h->index_offset);
  auto* seq = reinterpret_cast<uint64_t*>(base + h->seq_offset);
  std::mt19937_64 rng(5);
  for (int round = 0; round < 200; ++round) {
    for (uint64_t p = 0; p < h->pages; ++p) index[p] = rng() % 3 == 0 ? 0xFFFFFFFFu : uint32_t(rng());
    for (uint64_t f = 0; f < h->frames; ++f) seq[f] = rng();
    const uint64_t p = rng() % 64;
    ASSERT_TRUE(q.read(ns, p, 1, 4096, b.data()).ok());
    ASSERT_EQ(test::check_pattern(b.data(), 4096, p * 4096, 52), -1) << "page " << p << " round " << round;
  }
}
