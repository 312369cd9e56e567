// The recoverable BFS (apps/recoverable_bfs/recoverable_bfs.hpp) run by CPU
// threads: its state on a disk with a volatile write cache (crash_target.hpp)
// cut at hundreds of random requests in each power-cut mode, then revived
// and resumed by a new "process" (controller, cache, graph arrays): the
// depths must equal an uninterrupted run's and the reference's every time.
// Plus: a resume of a finished state does nothing; stops at every level;
// states holding data of levels that never committed (the depth array of an
// uncommitted checkpoint, log segments past the end); bad states rejected
// with errors that name the state and the mismatch; a real state file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "deepwell/controller/embedded.hpp"
#include "deepwell/graph/algorithms.hpp"
#include "deepwell/graph/build.hpp"
#include "deepwell/graph/cpu_exec.hpp"
#include "deepwell/graph/graph_arrays.hpp"
#include "deepwell/targets/crash_target.hpp"
#include "recoverable_bfs/recoverable_bfs.hpp"
#include "deepwell/graph/reference.hpp"
#include "cache_test_support.hpp"
#include "test_util.hpp"

using namespace deepwell;
using namespace deepwell::graph;

namespace {

using test::scratch_file;

template <class F>
void expect_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const deepwell::error& e) {
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
  }
}

constexpr const char* state_name = "crash-disk.rbfs";

// A Kronecker graph in a .dwg file, its identity, and the reference depths.
struct graph_fixture {
  scratch_file file{"rbfs.dwg"};
  csr_graph g;
  csr_view v;
  graph_identity id;
  uint32_t source = 0;
  std::vector<uint32_t> want;
  explicit graph_fixture(unsigned scale, uint64_t seed = 7) {
    generator_options o;
    o.scale = scale;
    o.degree = 8;
    o.seed = seed;
    g = generate(o);
    v = view_of(g);
    id = identity_of(g);
    source = uint32_t(max_degree_node(g.offsets.data(), g.nodes));
    want = bfs_reference(v, source);
    write_csr(file.path(), g);
  }
};

struct config {
  uint32_t page = 512;      // small pages: segments and checkpoints span many, all evicted often
  uint32_t slots = 64;      // 32 KiB of cache for ~170 KiB of edges and the state
  uint64_t log_words = 0;   // 0: the default (no checkpoint until the end)
  bool store_depths = true;
  unsigned threads = 2;
};

controller_config one_poller() {
  controller_config cc;
  cc.pollers = 1;
  return cc;
}

// One process's worth of deepwell: a controller, a small host cache, the
// graph read through the controller, and the state on `disk`.
struct process {
  controller ctl;
  std::shared_ptr<page_cache> cache;
  csr_file file;
  std::unique_ptr<graph_arrays> arrays;
  std::unique_ptr<bfs_state> state;
  cpu_exec x;
  process(const graph_fixture& f, std::shared_ptr<target> disk, const config& c)
      : ctl(one_poller()), file(f.file.path()), x(c.threads) {
    cache_config k;
    k.page_size = c.page;
    k.capacity_bytes = uint64_t(c.slots) * c.page;
    k.queue_pairs = 2;
    k.queue_entries = 64;
    k.timeout_ns = 20ull * 1000000000ull;
    k.direct_files = cache_config::file_tier::never;  // the graph through the controller too
    cache = make_host_page_cache(ctl, k);
    graph_dataset_options d;
    d.block_size = c.page;
    arrays = std::make_unique<graph_arrays>(cache, file, d);
    const uint32_t ns = ctl.add_namespace({std::move(disk), 512, false});
    state = std::make_unique<bfs_state>(cache, ns, state_name);
  }
  recoverable_bfs_result run(const graph_fixture& f, const config& c,
                             recoverable_bfs_options::start_t start = recoverable_bfs_options::start_t::resume_or_create,
                             uint32_t max_levels = ~0u, std::function<void(uint32_t)> hook = {}) {
    recoverable_bfs_options o;
    o.source = f.source;
    o.graph = f.id;
    o.start = start;
    o.store_depths = c.store_depths;
    o.log_words = c.log_words;
    o.max_levels = max_levels;
    o.after_commit = std::move(hook);
    return recoverable_bfs(x, arrays->view(), *state, o);
  }
};

uint64_t disk_bytes(const graph_fixture& f, const config& c) { return bfs_state_bytes(f.g.nodes, c.log_words); }

uint64_t differences(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  uint64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
  return d;
}

uint32_t word_at(const std::vector<uint8_t>& img, uint64_t w) {
  uint32_t v;
  std::memcpy(&v, img.data() + w * 4, 4);
  return v;
}

// What a cut left on the medium beyond what its committed header covers:
// log words past log_end, depth-array entries above the checkpoint level.
struct leftovers {
  bool log = false, depths = false;
};
leftovers uncommitted_data(const std::vector<uint8_t>& img, uint64_t nodes) {
  leftovers l;
  const bfs_state_summary s = inspect_bfs_state(img.data(), img.size());
  if (!s.valid) return l;
  const rbfs_header& h = s.header;
  for (uint64_t w = h.log_end; w < h.log_words && !l.log; ++w) l.log = word_at(img, h.log_at + w) != 0;
  for (uint64_t v = 0; v < nodes && !l.depths; ++v) {
    const uint32_t d = word_at(img, h.depth_at + v);
    l.depths = h.checkpoint_level == rbfs_no_checkpoint ? d != 0 : (d != not_reached && d > h.checkpoint_level);
  }
  return l;
}

// Cuts the power at random requests of runs (and of some resumes), revives
// and resumes: every resume must finish with the reference depths. Even
// trials run with the small cache (state pages evicted and written back
// before their persists, the cleaner busy), odd ones with a cache that
// holds everything (nothing is written back but by the persists).
void cut_and_resume(power_cut::mode_t mode, const config& base, unsigned trials, uint64_t seed) {
  const graph_fixture f(12);
  config cfgs[2] = {base, base};
  cfgs[1].slots = 1024;  // 512 KiB: the graph and the state, the cleaner idle
  // Requests of an uninterrupted run: where the cuts may fall.
  uint64_t reqs[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    auto disk = make_volatile_cache_target(disk_bytes(f, cfgs[k]));
    process p(f, disk, cfgs[k]);
    const recoverable_bfs_result r = p.run(f, cfgs[k]);
    ASSERT_TRUE(r.finished);
    ASSERT_EQ(differences(r.depth, f.want), 0u);
    reqs[k] = disk->requests();
    ASSERT_GT(reqs[k], 10u);
  }
  std::mt19937_64 rng(seed);
  unsigned fired = 0, resumed = 0, created = 0, log_leftovers = 0, depth_leftovers = 0, double_cuts = 0;
  uint64_t wrong = 0;
  for (unsigned t = 0; t < trials; ++t) {
    SCOPED_TRACE("trial " + std::to_string(t));
    const config& c = cfgs[t % 2];
    const uint64_t requests = reqs[t % 2];
    // Torn writes tear at 128-byte sectors, finer than a header copy (a
    // stricter disk than a real one): only the second copy saves a commit.
    auto disk = make_volatile_cache_target(disk_bytes(f, c), mode == power_cut::torn ? 128 : 512);
    power_cut how;
    how.mode = mode;
    how.seed = rng();
    how.keep_fraction = double(rng() % 1001) / 1000.0;
    const uint64_t at = t == 0 ? 1 : 1 + rng() % requests;  // the first before anything is durable
    disk->cut_at_request(at, how);
    // The newest level a commit said was durable: no cut may take it back.
    int64_t durable = -1;
    auto note = [&](uint32_t level) { durable = std::max<int64_t>(durable, level); };
    {
      process p(f, disk, c);
      try {
        p.run(f, c, recoverable_bfs_options::start_t::resume_or_create, ~0u, note);
      } catch (const deepwell::error&) {
      }
    }
    fired += disk->dead();
    if (!disk->dead()) disk->cut(how);  // the run got past `at`: cut it now
    disk->revive();
    // A third of the time, the resume is cut too.
    if (t % 3 == 0) {
      how.seed = rng();
      disk->cut_at_request(1 + rng() % (requests / 2 + 1), how);
      {
        process p(f, disk, c);
        try {
          p.run(f, c, recoverable_bfs_options::start_t::resume_or_create, ~0u, note);
        } catch (const deepwell::error&) {
        }
      }
      double_cuts += disk->dead();
      if (!disk->dead()) disk->cut(how);
      disk->revive();
    }
    const leftovers l = uncommitted_data(disk->durable_image(), f.g.nodes);
    log_leftovers += l.log;
    depth_leftovers += l.depths;
    process p(f, disk, c);
    recoverable_bfs_result r;
    try {
      r = p.run(f, c);
    } catch (const deepwell::error& e) {
      ADD_FAILURE() << "resume after a cut at request " << at << " (mode " << mode << ", keep " << how.keep_fraction
                    << ", seed " << how.seed << "): " << e.what();
      ++wrong;
      continue;
    }
    EXPECT_TRUE(r.finished);
    if (durable >= 0) {
      EXPECT_TRUE(r.resumed) << "level " << durable << " was committed, then lost";
      if (r.resumed) EXPECT_GE(int64_t(r.resumed_from), durable) << "a committed level was lost";
    }
    resumed += r.resumed;
    created += r.created;
    const uint64_t d = differences(r.depth, f.want);
    if (d) ADD_FAILURE() << d << " depths differ after a cut at request " << at << " (mode " << mode << ")";
    wrong += d != 0;
  }
  EXPECT_EQ(wrong, 0u);
  // The cuts fell where they should: most during the run, and resumes of
  // real progress (not just fresh starts).
  EXPECT_GT(fired, trials * 8 / 10);
  EXPECT_GT(resumed, trials / 2);
  std::printf("%u cuts (%u during the run, %u resumes cut too): %u resumed, %u started over; left on the medium "
              "past the commit: log %u, depth array %u\n",
              trials, fired, double_cuts, resumed, created, log_leftovers, depth_leftovers);
  if (mode != power_cut::drop_all && trials >= 30) {
    EXPECT_GT(log_leftovers, 0u) << "no cut left uncommitted log data on the medium: the subtle case went untested";
    if (base.log_words) EXPECT_GT(depth_leftovers, 0u) << "no cut left an uncommitted checkpoint on the medium";
  }
}

// The durable image of a new state run `levels` levels in (unfinished),
// and the level it committed last.
std::vector<uint8_t> image_after(const graph_fixture& f, const config& c, uint32_t levels, uint32_t* level = nullptr) {
  auto disk = make_volatile_cache_target(disk_bytes(f, c));
  process p(f, disk, c);
  const uint32_t l = p.run(f, c, recoverable_bfs_options::start_t::create, levels).level;
  if (level) *level = l;
  return disk->durable_image();
}

constexpr unsigned trials = unsigned(60 / test::scale_div);
config small_log() {
  config c;
  c.log_words = 200;  // a segment or two, then a checkpoint
  return c;
}

}  // namespace

// ---- uninterrupted runs ----

TEST(RecoverableBfs, MatchesTheReferenceAndThePlainBfs) {
  const graph_fixture f(12);
  for (const uint64_t log : {uint64_t(0), uint64_t(200)}) {
    config c;
    c.log_words = log;
    auto disk = make_volatile_cache_target(disk_bytes(f, c));
    process p(f, disk, c);
    const recoverable_bfs_result r = p.run(f, c);
    EXPECT_TRUE(r.finished);
    EXPECT_TRUE(r.created);
    EXPECT_EQ(differences(r.depth, f.want), 0u);
    EXPECT_EQ(r.reached, uint64_t(std::count_if(f.want.begin(), f.want.end(), [](uint32_t d) { return d != unreached; })));
    if (log) EXPECT_GT(r.checkpoints, 1u);  // the log filled up
    bfs_options bo;
    bo.source = f.source;
    const bfs_result plain = bfs(p.x, p.arrays->view(), bo);
    EXPECT_EQ(plain.depth, r.depth);
    // The same direction rule (bfs_direction): the same levels go bottom-up.
    EXPECT_EQ(r.bottom_up_levels, plain.bottom_up_levels);
    EXPECT_GT(r.bottom_up_levels, 0u);
    // The durable state holds the result (store_depths) and a finished header.
    const std::vector<uint8_t> img = disk->durable_image();
    const bfs_state_summary s = inspect_bfs_state(img.data(), img.size());
    ASSERT_TRUE(s.valid) << s.problem;
    EXPECT_EQ(s.header.flags, uint32_t(rbfs_done | rbfs_depths_complete));
    EXPECT_EQ(s.header.level, r.level);
    for (uint64_t v = 0; v < f.g.nodes; ++v) ASSERT_EQ(word_at(img, s.header.depth_at + v), f.want[v]) << v;
  }
  // Top-down only, over plain memory (no cache for the graph), four threads.
  auto disk = make_volatile_cache_target(bfs_state_bytes(f.g.nodes));
  controller ctl;
  auto cache = make_host_page_cache(ctl, test::small_cache(16));
  bfs_state st(cache, ctl.add_namespace({disk, 512, false}), state_name);
  cpu_exec x(4);
  recoverable_bfs_options o;
  o.source = f.source;
  o.graph = f.id;
  o.direction_optimizing = false;
  const memory_graph m{f.g.nodes, f.g.offsets.data(), f.g.nbr32.data(), nullptr};
  const recoverable_bfs_result r = recoverable_bfs(x, m, st, o);
  EXPECT_EQ(differences(r.depth, f.want), 0u);
  EXPECT_EQ(r.bottom_up_levels, 0u);
}

// A finished state resumed: no level runs, nothing is written.
TEST(RecoverableBfs, ResumingAFinishedStateIsANoOp) {
  const graph_fixture f(12);
  for (const bool store : {false, true}) {
    config c;
    c.store_depths = store;
    auto disk = make_volatile_cache_target(disk_bytes(f, c));
    {
      process p(f, disk, c);
      ASSERT_TRUE(p.run(f, c).finished);
    }
    const uint64_t requests = disk->requests();
    const std::vector<uint8_t> before = disk->durable_image();
    process p(f, disk, c);
    const recoverable_bfs_result r = p.run(f, c, recoverable_bfs_options::start_t::resume);
    EXPECT_TRUE(r.resumed);
    EXPECT_TRUE(r.finished);
    EXPECT_EQ(r.levels_run, 0u);
    EXPECT_EQ(r.commits, 0u);
    EXPECT_EQ(r.state_words_written, 0u);
    EXPECT_EQ(disk->requests(), requests) << "a resume of a finished state wrote or flushed";
    EXPECT_TRUE(disk->durable_image() == before);
    EXPECT_EQ(differences(r.depth, f.want), 0u);
  }
}

// Stopped after every level (a clean kill), each resume by a new process.
TEST(RecoverableBfs, StopsAndResumesAtEveryLevel) {
  const graph_fixture f(12);
  for (const uint64_t log : {uint64_t(0), uint64_t(200)}) {
    config c;
    c.log_words = log;
    auto disk = make_volatile_cache_target(disk_bytes(f, c));
    unsigned calls = 0;
    uint32_t last = 0;
    recoverable_bfs_result r;
    do {
      process p(f, disk, c);
      r = p.run(f, c, recoverable_bfs_options::start_t::resume_or_create, 1);
      if (calls) {
        EXPECT_TRUE(r.resumed);
        EXPECT_EQ(r.resumed_from, last);
      }
      EXPECT_LE(r.levels_run, 1u);
      last = r.level;
      ASSERT_LT(++calls, 100u);
    } while (!r.finished);
    EXPECT_GE(calls, 4u);
    EXPECT_EQ(differences(r.depth, f.want), 0u);
  }
}

// ---- power cuts ----

TEST(RecoverableBfs, SurvivesPowerCutsDropAll) { cut_and_resume(power_cut::drop_all, config{}, trials, 101); }
TEST(RecoverableBfs, SurvivesPowerCutsKeepRandom) { cut_and_resume(power_cut::keep_random, config{}, trials, 202); }
TEST(RecoverableBfs, SurvivesPowerCutsTorn) { cut_and_resume(power_cut::torn, config{}, trials, 303); }
// A log of a few segments: checkpoints of the depth array all the time.
TEST(RecoverableBfs, SurvivesPowerCutsDuringCheckpointsDropAll) {
  cut_and_resume(power_cut::drop_all, small_log(), trials, 404);
}
TEST(RecoverableBfs, SurvivesPowerCutsDuringCheckpointsKeepRandom) {
  cut_and_resume(power_cut::keep_random, small_log(), trials, 505);
}
TEST(RecoverableBfs, SurvivesPowerCutsDuringCheckpointsTorn) {
  cut_and_resume(power_cut::torn, small_log(), trials, 606);
}

// The state a cut leaves when everything of level L + 1 reached the medium
// but its header did not: level L's header over level L + 1's data (its
// log segment, or a whole checkpoint with depths L + 1 in it). Built from
// the images after consecutive commits, for every level; and again with
// junk in the log past its end and in the depth array above its
// checkpoint. Each must resume to the reference.
TEST(RecoverableBfs, DataOfLevelsThatNeverCommittedIsIgnored) {
  const graph_fixture f(12);
  const config c = small_log();
  auto disk = make_volatile_cache_target(disk_bytes(f, c));
  std::vector<std::vector<uint8_t>> images;  // after each commit
  {
    process p(f, disk, c);
    images.push_back(disk->durable_image());  // (the empty disk)
    p.run(f, c, recoverable_bfs_options::start_t::create, ~0u, [&](uint32_t) { images.push_back(disk->durable_image()); });
  }
  ASSERT_GE(images.size(), 5u);
  unsigned with_depths_above = 0, with_log_past_end = 0;
  std::mt19937_64 rng(9);
  for (size_t k = 1; k + 1 < images.size(); ++k) {
    for (const bool junk : {false, true}) {
      SCOPED_TRACE("commit " + std::to_string(k) + (junk ? " with junk" : ""));
      std::vector<uint8_t> img = images[k + 1];
      std::memcpy(img.data(), images[k].data(), rbfs_depth_word * 4);  // both header copies of commit k
      const bfs_state_summary s = inspect_bfs_state(img.data(), img.size());
      ASSERT_TRUE(s.valid);
      const rbfs_header& h = s.header;
      if (junk) {
        for (uint64_t w = h.log_end; w < h.log_words; ++w) {
          const uint32_t j = uint32_t(rng());
          std::memcpy(img.data() + (h.log_at + w) * 4, &j, 4);
        }
        if (h.checkpoint_level != rbfs_no_checkpoint)
          for (uint64_t v = 0; v < f.g.nodes; ++v) {
            const uint32_t d = word_at(img, h.depth_at + v);
            if (d == not_reached || d > h.checkpoint_level) {
              const uint32_t j = h.checkpoint_level + 1 + uint32_t(rng() % 1000);
              std::memcpy(img.data() + (h.depth_at + v) * 4, &j, 4);
            }
          }
      }
      const leftovers l = uncommitted_data(img, f.g.nodes);
      with_depths_above += l.depths && !junk;
      with_log_past_end += l.log && !junk;
      process p(f, make_volatile_cache_target(img), c);
      const recoverable_bfs_result r = p.run(f, c);
      EXPECT_TRUE(r.resumed);
      EXPECT_EQ(r.resumed_from, h.level);
      EXPECT_EQ(differences(r.depth, f.want), 0u);
    }
  }
  EXPECT_GT(with_depths_above, 0u) << "no uncommitted checkpoint among the levels";
  EXPECT_GT(with_log_past_end, 0u) << "no uncommitted segment among the levels";
}

// ---- bad states ----

TEST(RecoverableBfs, BadStatesAreRejected) {
  const graph_fixture f(12);
  const config c;
  uint32_t level = 0;
  const std::vector<uint8_t> good = image_after(f, c, 3, &level);  // unfinished, three levels in
  const bfs_state_summary s = inspect_bfs_state(good.data(), good.size());
  ASSERT_TRUE(s.valid);
  ASSERT_EQ(s.header.level, level);
  auto with = [&](auto&& edit) {
    std::vector<uint8_t> img = good;
    edit(img);
    return make_volatile_cache_target(std::move(img));
  };

  // Another graph of the same size.
  {
    const graph_fixture other(12, 8);
    ASSERT_EQ(other.g.nodes, f.g.nodes);
    process p(other, with([](auto&) {}), c);
    expect_error([&] { p.run(other, c); }, {state_name, "another graph"});
  }
  // Another source.
  {
    process p(f, with([](auto&) {}), c);
    recoverable_bfs_options o;
    o.graph = f.id;
    o.source = f.source == 0 ? 1 : 0;
    expect_error([&] { recoverable_bfs(p.x, p.arrays->view(), *p.state, o); },
                 {state_name, "is for source " + std::to_string(f.source) + ", not"});
    // Starting over replaces it.
    o.start = recoverable_bfs_options::start_t::create;
    const recoverable_bfs_result r = recoverable_bfs(p.x, p.arrays->view(), *p.state, o);
    EXPECT_TRUE(r.created);
    EXPECT_EQ(r.depth, bfs_reference(f.v, o.source));
  }
  // Both header copies corrupt.
  {
    process p(f, with([](auto& img) {
                img[100] ^= 1;
                img[4096 + 100] ^= 1;
              }),
              c);
    expect_error([&] { p.run(f, c); }, {state_name, "no valid header", "checksum mismatch"});
  }
  // Only the newest copy corrupt: the older one is in force, one level back.
  {
    process p(f, with([&](auto& img) { img[rbfs_copy_word[s.copy] * 4 + 200] ^= 0x40; }), c);
    const recoverable_bfs_result r = p.run(f, c);
    EXPECT_TRUE(r.resumed);
    EXPECT_EQ(r.resumed_from, level - 1);
    EXPECT_EQ(differences(r.depth, f.want), 0u);
  }
  // Not a state at all.
  {
    process p(f, with([](auto& img) {
                for (size_t i = 0; i < 8192; ++i) img[i] = uint8_t(i * 7 + 3);
              }),
              c);
    expect_error([&] { p.run(f, c); }, {state_name, "not a recoverable BFS state", "wrong magic"});
  }
  // A corrupt log: a list entry changed, then a segment's level.
  {
    const uint64_t seg0 = s.header.log_at;  // level 0: the source, a list of one
    process p(f, with([&](auto& img) { img[(seg0 + 4) * 4 + 3] = 0xF0; }), c);
    expect_error([&] { p.run(f, c); }, {state_name, "log segment at word 0", "out of range"});
    process q(f, with([&](auto& img) { img[(seg0 + 1) * 4] = 7; }), c);
    expect_error([&] { q.run(f, c); }, {state_name, "log segment at word 0", "corrupt"});
  }
  // Too small a namespace for the graph; nothing to resume.
  {
    process p(f, make_volatile_cache_target(64 * 1024), c);
    expect_error([&] { p.run(f, c); }, {state_name, "too small"});
    process q(f, make_volatile_cache_target(disk_bytes(f, c)), c);
    expect_error([&] { q.run(f, c, recoverable_bfs_options::start_t::resume); }, {state_name, "no recoverable BFS state to resume"});
  }
  // The identity must be the graph's.
  {
    process p(f, with([](auto&) {}), c);
    recoverable_bfs_options o;
    o.source = f.source;
    expect_error([&] { recoverable_bfs(p.x, p.arrays->view(), *p.state, o); }, {"graph identity"});
  }
  // The same graph read from its file has the identity it has in memory.
  EXPECT_EQ(identity_of(csr_file(f.file.path())).hash, f.id.hash);
}

// A level's segment and its header reach the medium under one flush, so a
// cut may land the header alone. Its recovery then fails and the older
// copy (the level before) is in force; a creation whose first commit did
// not land whole starts over (or, asked only to resume, says so).
TEST(RecoverableBfs, AHeaderWhoseSegmentDidNotLandFallsBackALevel) {
  const graph_fixture f(12);
  const config c;
  uint32_t level = 0;
  const std::vector<uint8_t> good = image_after(f, c, 3, &level);
  const bfs_state_summary s = inspect_bfs_state(good.data(), good.size());
  ASSERT_TRUE(s.valid);
  ASSERT_TRUE(s.older_valid);
  ASSERT_EQ(s.older.level + 1, s.header.level);
  ASSERT_GT(s.header.log_end, s.older.log_end);
  std::vector<uint8_t> img = good;  // the newest level's segment never landed
  std::memset(img.data() + (s.header.log_at + s.older.log_end) * 4, 0, (s.header.log_end - s.older.log_end) * 4);
  {
    process p(f, make_volatile_cache_target(img), c);
    const recoverable_bfs_result r = p.run(f, c);
    EXPECT_TRUE(r.resumed);
    EXPECT_EQ(r.resumed_from, level - 1);
    EXPECT_TRUE(r.finished);
    EXPECT_EQ(differences(r.depth, f.want), 0u);
  }
  // The same with the older copy gone too: a corrupt state, named.
  img[rbfs_copy_word[1 - s.copy] * 4 + 100] ^= 1;
  {
    process p(f, make_volatile_cache_target(img), c);
    expect_error([&] { p.run(f, c); }, {state_name, "log"});
  }
  // The creation's commit (generation 1): its level-0 segment lost.
  std::vector<uint8_t> created = image_after(f, c, 0);
  const bfs_state_summary s0 = inspect_bfs_state(created.data(), created.size());
  ASSERT_TRUE(s0.valid);
  ASSERT_EQ(s0.header.generation, 1u);
  std::memset(created.data() + s0.header.log_at * 4, 0, s0.header.log_end * 4);
  {
    process p(f, make_volatile_cache_target(created), c);
    expect_error([&] { p.run(f, c, recoverable_bfs_options::start_t::resume); }, {state_name, "creation was cut short"});
  }
  {
    process p(f, make_volatile_cache_target(created), c);
    const recoverable_bfs_result r = p.run(f, c);
    EXPECT_TRUE(r.created);
    EXPECT_EQ(differences(r.depth, f.want), 0u);
  }
}

// A corrupt checkpoint (the depth array a header relies on) is found by the
// header's counts and checksum.
TEST(RecoverableBfs, CorruptCheckpointIsFound) {
  const graph_fixture f(12);
  const config c = small_log();
  auto disk = make_volatile_cache_target(disk_bytes(f, c));
  {
    process p(f, disk, c);
    p.run(f, c, recoverable_bfs_options::start_t::create, 4);
  }
  std::vector<uint8_t> img = disk->durable_image();
  const bfs_state_summary s = inspect_bfs_state(img.data(), img.size());
  ASSERT_TRUE(s.valid);
  ASSERT_NE(s.header.checkpoint_level, rbfs_no_checkpoint);
  // A node the checkpoint has at depth 1 moved to depth 0.
  uint64_t v = 0;
  while (v < f.g.nodes && word_at(img, s.header.depth_at + v) != 1) ++v;
  ASSERT_LT(v, f.g.nodes);
  const uint32_t zero = 0;
  std::memcpy(img.data() + (s.header.depth_at + v) * 4, &zero, 4);
  process p(f, make_volatile_cache_target(img), c);
  expect_error([&] { p.run(f, c); }, {state_name, "do not match the header"});
}

// ---- a real file ----

TEST(RecoverableBfs, AStateFileSurvivesTheProcess) {
  const graph_fixture f(12);
  scratch_file sf("state.rbfs");
  const config c;
  auto open = [&](const graph_fixture& g) {
    auto t = open_bfs_state_file(sf.path(), g.g.nodes);
    EXPECT_EQ(t->size(), bfs_state_bytes(g.g.nodes));
    return t;
  };
  {
    process p(f, open(f), c);
    const recoverable_bfs_result r = p.run(f, c, recoverable_bfs_options::start_t::resume_or_create, 2);
    EXPECT_TRUE(r.created);
    EXPECT_FALSE(r.finished);
    EXPECT_EQ(r.level, 2u);
  }
  process p(f, open(f), c);
  const recoverable_bfs_result r = p.run(f, c);
  EXPECT_TRUE(r.resumed);
  EXPECT_EQ(r.resumed_from, 2u);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(differences(r.depth, f.want), 0u);
}
