// A dataset's page source (page_source.hpp), set when it is added: the
// source each dataset gets, that fills come from it (and from the
// controller where it has no mapping), that an owner may declare its
// source again but not replace one the link gave, and the write-back
// tally. CPU clients; the GPU integrity suites run the same fill path.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/files/file_system.hpp"
#include "deepwell/views/array.hpp"
#include "cache_test_support.hpp"
#include "test_util.hpp"

using namespace deepwell;
using options = page_cache::dataset_options;

namespace {

constexpr uint64_t seed = 21;
constexpr uint32_t page = 4096;
constexpr uint64_t words_per_page = page / 8;

uint64_t expected(uint64_t i, uint64_t s = seed) { return test::pattern_word(i * 8, s); }

template <class F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(PageSources, EachDatasetIsFilledFromTheSourceItWasAddedWith) {
  controller ctl;
  const uint32_t mapped_ns = ctl.add_namespace({test::pattern_memory(1 << 20, false, seed), 4096, true});
  const uint32_t queued_ns = ctl.add_namespace({test::pattern_memory(1 << 20, false, seed), 4096, true});
  auto cache = make_host_page_cache(ctl, test::small_cache(16));
  options controller_only;
  controller_only.source = options::source_t::link;
  const uint32_t queued = cache->add_dataset(queued_ns, controller_only);
  EXPECT_EQ(cache->dataset(queued).source.kind, page_source_kind::link);
  EXPECT_NE(cache->route(queued).find("queued to"), std::string::npos) << cache->route(queued);

  // The controller's source although the link offers a mapping: every
  // miss is a command.
  array<uint64_t> q(cache, queued_ns);
  for (uint64_t i = 0; i < q.size(); i += 97) ASSERT_EQ(q.ref()[i], expected(i)) << i;
  cache_stats st = cache->stats();
  EXPECT_GT(st.misses, 0u);
  EXPECT_EQ(st.direct_fills, 0u);
  EXPECT_EQ(ctl.total_counters().reads, st.misses);

  // Automatic: the link's mapping of the dataset, no command.
  const uint64_t reads_before = ctl.total_counters().reads;
  cache->reset_stats();
  array<uint64_t> m(cache, mapped_ns);
  EXPECT_EQ(cache->dataset(m.ref().dataset).source.kind, page_source_kind::host_mapping);
  EXPECT_NE(cache->dataset(m.ref().dataset).source.mapped(), nullptr);
  for (uint64_t i = 0; i < m.size(); i += 97) ASSERT_EQ(m.ref()[i], expected(i)) << i;
  st = cache->stats();
  EXPECT_GT(st.misses, 0u);
  EXPECT_EQ(st.direct_fills, st.misses);
  EXPECT_EQ(ctl.total_counters().reads, reads_before);
}

TEST(PageSources, WindowMappingsFillMappedWindowsAndTheControllerTheRest) {
  // Four windows of 16 pages. Window 1 maps other bytes than the store
  // holds (seed 77), for 5 pages and 100 bytes: its pages 0-4 come from
  // the mapping, page 5 from the mapping's last 100 bytes (the rest of the
  // page zero), and pages 6-15, like windows 0, 2 and 3, from the
  // controller. Clearing the entry sends window 1 back to the controller.
  constexpr uint32_t shift = 4, pages_per_window = 1u << shift, windows = 4;
  controller ctl;
  const uint32_t ns =
      ctl.add_namespace({test::pattern_memory(uint64_t(windows) * pages_per_window * page, false, seed), 4096, true});
  auto cache = make_host_page_cache(ctl, test::small_cache(128));
  std::vector<window_source> table(windows, window_source{0, 0});
  const uint64_t mapped_bytes = 5ull * page + 100;
  std::vector<uint64_t> other(pages_per_window * words_per_page);
  for (uint64_t i = 0; i < other.size(); ++i) other[i] = expected(i, 77);
  table[1] = window_source{reinterpret_cast<unsigned long long>(other.data()), mapped_bytes};

  options o;
  o.source = options::source_t::windows;
  o.windows = table.data();
  o.window_shift = shift;
  const uint32_t id = cache->add_dataset(ns, o);
  EXPECT_EQ(cache->dataset(id).source.kind, page_source_kind::window_mappings);
  EXPECT_NE(cache->route(id).find("windows"), std::string::npos) << cache->route(id);
  array<uint64_t> a(cache, ns);
  ASSERT_EQ(a.ref().dataset, id);

  auto check_all = [&](bool window1_mapped) {
    for (uint64_t p = 0; p < uint64_t(windows) * pages_per_window; ++p) {
      const bool in1 = p / pages_per_window == 1;
      const uint64_t within = p % pages_per_window;
      for (uint64_t w : {uint64_t(0), uint64_t(11), uint64_t(13), words_per_page - 1}) {  // not word 12: bytes 96-103 straddle the 100
        const uint64_t i = p * words_per_page + w;
        uint64_t want = expected(i);
        if (window1_mapped && in1 && within < 5) want = expected(within * words_per_page + w, 77);
        if (window1_mapped && in1 && within == 5) want = w * 8 + 8 <= 100 ? expected(within * words_per_page + w, 77) : 0;
        ASSERT_EQ(a.ref()[i], want) << "page " << p << " word " << w;
      }
    }
  };
  check_all(true);
  cache_stats st = cache->stats();
  EXPECT_EQ(st.direct_fills, 6u) << "window 1's mapped pages, and only those";
  EXPECT_EQ(ctl.total_counters().reads, st.misses - 6);

  ASSERT_TRUE(cache->clear().ok());
  table[1] = window_source{0, 0};  // no client reads meanwhile
  cache->reset_stats();
  check_all(false);
  EXPECT_EQ(cache->stats().direct_fills, 0u);
}

TEST(PageSources, AnOwnerDeclaresItsSourceAgainButNotOverTheLinks) {
  controller ctl;
  const uint32_t mapped_ns = ctl.add_namespace({test::pattern_memory(1 << 20, false, seed), 4096, true});
  const uint32_t owned_ns = ctl.add_namespace({test::pattern_memory(1 << 20, false, seed), 4096, true});
  auto cache = make_host_page_cache(ctl, test::small_cache(16));
  std::vector<window_source> first(4, window_source{0, 0}), second(4, window_source{0, 0});
  options o;
  o.source = options::source_t::windows;
  o.windows = first.data();
  o.window_shift = 4;

  const uint32_t mapped = cache->add_dataset(mapped_ns);
  ASSERT_EQ(cache->dataset(mapped).source.kind, page_source_kind::host_mapping);
  expect_error([&] { cache->add_dataset(mapped_ns, o); }, "another source");
  EXPECT_EQ(cache->dataset(mapped).source.kind, page_source_kind::host_mapping) << "left as it was";

  options controller_only;
  controller_only.source = options::source_t::link;
  const uint32_t owned = cache->add_dataset(owned_ns, controller_only);
  EXPECT_EQ(cache->add_dataset(owned_ns, o), owned) << "one id per namespace";
  EXPECT_EQ(cache->dataset(owned).source.windows, first.data());
  o.windows = second.data();
  EXPECT_EQ(cache->add_dataset(owned_ns, o), owned);
  EXPECT_EQ(cache->dataset(owned).source.windows, second.data()) << "the newest owner's table";
  EXPECT_EQ(cache->add_dataset(owned_ns), owned) << "an array's automatic add keeps the owner's source";
  EXPECT_EQ(cache->dataset(owned).source.kind, page_source_kind::window_mappings);
  EXPECT_EQ(cache->add_dataset(owned_ns, controller_only), owned);
  EXPECT_EQ(cache->dataset(owned).source.kind, page_source_kind::link) << "no table left behind";

  options bad = o;
  bad.windows = nullptr;
  expect_error([&] { cache->add_dataset(owned_ns, bad); }, "table");
  bad = o;
  bad.window_shift = 64;
  expect_error([&] { cache->add_dataset(owned_ns, bad); }, "shift");
  bad = controller_only;
  uint32_t counts[4] = {};
  bad.writeback_counts = counts;
  bad.writeback_shift = 70;
  expect_error([&] { cache->add_dataset(owned_ns, bad); }, "shift");
}

TEST(PageSources, TheTallyCountsEachWriteBackOfItsRange) {
  controller ctl;
  const uint32_t ns = ctl.add_namespace({test::pattern_memory(16 * page, true, seed), 4096, false});
  auto cache = make_host_page_cache(ctl, test::small_cache(32));
  std::vector<uint32_t> counts(4, 0);
  options o;
  o.writeback_counts = counts.data();
  o.writeback_shift = 2;  // four pages a counter
  const uint32_t id = cache->add_dataset(ns, o);
  EXPECT_EQ(cache->dataset(id).tally.counts, counts.data());
  array<uint64_t> a(cache, ns);
  for (uint64_t p : {0u, 5u, 6u, 15u}) ASSERT_TRUE(a.ref().write(p * words_per_page + 3, 1000 + p).ok());
  ASSERT_TRUE(cache->flush().ok());
  EXPECT_EQ(counts, (std::vector<uint32_t>{1, 2, 0, 1}));
  ASSERT_TRUE(a.ref().write(6 * words_per_page, 7).ok());
  ASSERT_TRUE(cache->flush().ok());
  EXPECT_EQ(counts, (std::vector<uint32_t>{1, 3, 0, 1}));
  for (uint64_t p : {0u, 5u, 6u, 15u}) EXPECT_EQ(a.ref()[p * words_per_page + 3], 1000 + p);
}

TEST(PageSources, AFileSystemGoneLeavesNoTableOrTallyBehind) {
  // Its window table and write-back words are client memory freed with
  // it; the namespace's dataset stays in the cache (pages may too).
  std::string root = test::scratch_dir() + "/deepwell-sources-XXXXXX";
  ASSERT_NE(mkdtemp(root.data()), nullptr);
  auto cache = make_host_page_cache(embedded_link(), test::small_cache(64));
  uint32_t id = 0;
  {
    file_system_options o;
    o.root = root;
    o.files_direct = file_system_options::direct_tier::on;
    auto fs = make_host_file_system(cache, o);
    id = fs->ref().bytes.dataset;
    EXPECT_EQ(cache->dataset(id).source.kind, page_source_kind::window_mappings);
    EXPECT_NE(cache->dataset(id).tally.counts, nullptr);
  }
  EXPECT_EQ(cache->dataset(id).source.kind, page_source_kind::link);
  EXPECT_EQ(cache->dataset(id).tally.counts, nullptr);
  EXPECT_EQ(cache->dataset(id).source.windows, nullptr);
  rmdir(root.c_str());
}
