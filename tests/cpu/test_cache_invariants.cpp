// The page cache's internal invariants (detail::cache_access, the test
// access point): after many CPU threads read, write, prefetch and pin pages
// under eviction, and again after flush, no slot is left pinned or claimed,
// each page has one slot and one directory entry, and the dirty counter
// matches the slots. The data is checked too, through the cache and in the
// dataset after flush.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "deepwell/cache/detail/access.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/views/array.hpp"
#include "cache_test_support.hpp"

using namespace deepwell;

namespace {

struct invariant_case {
  bool direct;       // host memory read straight (the direct tier) or through the controller
  double clean;      // the cleaner's threshold
};

class CacheInvariants : public ::testing::TestWithParam<invariant_case> {};

}  // namespace

TEST_P(CacheInvariants, HoldAfterConcurrentReadsWritesAndPrefetchesAndAfterFlush) {
  constexpr uint32_t page = 512;
  constexpr uint64_t pages = 256;  // four times the cache
  constexpr uint64_t words = pages * page / 8;
  constexpr unsigned threads = 4;
#ifdef DEEPWELL_TSAN_BUILD
  constexpr uint32_t ops = 3000;
#else
  constexpr uint32_t ops = 40000;
#endif
  controller ctl;
  auto mem = make_host_memory_target(pages * page, true);
  auto* host = static_cast<uint64_t*>(mem->host_pointer());
  for (uint64_t i = 0; i < words; ++i) host[i] = i * 3 + 1;
  const uint32_t ns = ctl.add_namespace({mem, 512, false});
  cache_config cfg = test::small_cache(64 + 32, page);
  cfg.direct_tier = GetParam().direct;
  cfg.clean_threshold = GetParam().clean;
  auto cache = make_host_page_cache(ctl, cfg);
  array<uint64_t> a(cache, ns);
  const array_ref<uint64_t> r = a.ref();

  // Thread t owns the words i with i % threads == t: it knows their values.
  std::vector<std::vector<uint64_t>> model(threads, std::vector<uint64_t>(words));
  std::vector<uint64_t> bad(threads, 0);
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::vector<uint64_t>& m = model[t];
      for (uint64_t i = t; i < words; i += threads) m[i] = i * 3 + 1;
      std::mt19937_64 rng(100 + t);
      for (uint32_t k = 0; k < ops; ++k) {
        const uint64_t i = (rng() % (words / threads)) * threads + t;
        switch (rng() % 8) {
          case 0:
          case 1:
          case 2: {
            request_status s;
            if (r.try_read(i, &s) != m[i] || !s.ok()) ++bad[t];
            break;
          }
          case 3:
          case 4: {
            const uint64_t v = rng();
            if (r.write(i, v).ok()) m[i] = v; else ++bad[t];
            break;
          }
          case 5:
            r.prefetch((rng() % words));
            break;
          default: {
            page_handle<uint64_t> h = r.page(i);
            if (!h.ok()) {
              ++bad[t];
              break;
            }
            if (h[i] != m[i]) ++bad[t];
            const uint64_t v = rng();
            h.write(i, v);
            m[i] = v;
            h.release();
          }
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  for (unsigned t = 0; t < threads; ++t) EXPECT_EQ(bad[t], 0u) << "thread " << t;
  EXPECT_EQ(detail::cache_access::check_invariants(cache->ref()), "");

  ASSERT_TRUE(cache->flush().ok());
  EXPECT_EQ(detail::cache_access::check_invariants(cache->ref()), "");
  EXPECT_EQ(detail::cache_access::dirty_pages(cache->ref()), 0u);
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < words; ++i) wrong += host[i] != model[i % threads][i];
  EXPECT_EQ(wrong, 0u) << "words in the dataset that differ from the last write after flush";

  ASSERT_TRUE(cache->clear().ok());
  EXPECT_EQ(detail::cache_access::check_invariants(cache->ref()), "");
  for (uint32_t s = 0; s < cache->slots(); ++s)
    ASSERT_EQ(detail::cache_access::slot_state(cache->ref(), s) & ~slot_state::gen_mask, 0u)
        << "slot " << s << " after clear (only its generation is kept)";
}

INSTANTIATE_TEST_SUITE_P(Cache, CacheInvariants,
                         ::testing::Values(invariant_case{false, 1.0 / 16}, invariant_case{true, 1.0 / 16},
                                           invariant_case{false, 0.0}),
                         [](const ::testing::TestParamInfo<invariant_case>& p) {
                           return std::string(p.param.direct ? "Direct" : "Controller") +
                                  (p.param.clean > 0 ? "Cleaner" : "NoCleaner");
                         });
