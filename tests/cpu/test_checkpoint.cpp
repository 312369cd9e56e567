// Checkpoints (durable/checkpoint.hpp) with a host page cache and CPU
// threads, on a disk with a volatile write cache (crash_target.hpp): round
// trips, incremental saves (only changed units reach the disk), every kind
// of bad input named in the error, and power cuts at random requests in
// each mode: after revive and reopen, load gives exactly the last checkpoint
// whose save() returned, or the one being saved when the power went, never
// a mix and never an error unless nothing was ever saved.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "deepwell/c/deepwell.h"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/checkpoint.hpp"
#include "deepwell/targets/crash_target.hpp"
#include "cache_test_support.hpp"
#include "test_util.hpp"

using namespace deepwell;

namespace {

constexpr uint64_t R = 64 * 1024;          // the format's region
constexpr uint64_t disk_bytes = 640 * 1024;

// A disk, its controller, one namespace and a host cache; down() and up()
// replace the controller and the cache (a restarted process).
struct rig {
  std::shared_ptr<volatile_cache_target> disk;
  std::unique_ptr<controller> ctl;
  std::shared_ptr<fault_target> faults;
  uint32_t ns = 0;
  std::shared_ptr<page_cache> cache;
  uint64_t pages;
  uint32_t page_size;
  std::optional<cache_config> config;  // in place of small_cache(pages, page_size)
  explicit rig(std::shared_ptr<volatile_cache_target> d = make_volatile_cache_target(disk_bytes), uint64_t pages_ = 64,
               uint32_t page = 4096, std::optional<cache_config> cfg = {})
      : disk(std::move(d)), pages(pages_), page_size(page), config(std::move(cfg)) {
    up();
  }
  ~rig() { down(); }
  void up() {
    controller_config cc;
    cc.pollers = 1;
    ctl = std::make_unique<controller>(cc);
    faults = make_fault_target(disk);
    ns = ctl->add_namespace({faults, 512, false});
    auto c = config ? *config : test::small_cache(pages, page_size);
    // Generous: a loaded CI machine (two cores, ThreadSanitizer beside
    // other suites) must not turn a slow wait into a failed save; a real
    // hang still ends at ctest's limit.
    c.timeout_ns = 60ull * 1000000000ull;
    cache = make_host_page_cache(*ctl, c);
  }
  void down() {
    cache.reset();
    ctl.reset();
  }
  std::vector<uint8_t> image() const { return disk->durable_image(); }
};

fault_rule fail_flush_once() {
  fault_rule f;
  f.kind = fault_rule::fail_flush;
  f.count = 1;
  return f;
}
fault_rule fail_write_once(uint64_t offset, uint64_t length) {
  fault_rule f;
  f.kind = fault_rule::fail_write;
  f.offset = offset;
  f.length = length;
  f.count = 1;
  return f;
}
checkpoint_options small_opts(uint64_t chunk = 32ull << 20) {
  checkpoint_options o;
  o.threads = 2;
  o.chunk_bytes = chunk;  // small: saves copy and write back in a pipeline of several chunks
  return o;
}

// A manifest with a multi-unit buffer, a small one, an empty one and one
// whose size is not a multiple of the unit.
checkpoint_manifest test_manifest() {
  return {{"a", 10000, "float32", {2500}},
          {"b", 300, "int64", {5, 7}},
          {"empty", 0, "float32", {0}},
          {"c", 3 * 4096 + 100, "uint8", {12388}}};
}

using contents = std::vector<std::vector<uint8_t>>;

contents random_contents(const checkpoint_manifest& m, std::mt19937_64& rng) {
  contents c;
  for (const auto& t : m) {
    std::vector<uint8_t> b(t.bytes);
    for (auto& x : b) x = uint8_t(rng());
    c.push_back(std::move(b));
  }
  return c;
}

// Changes each 4 KiB unit with probability p (a few bytes of it).
contents mutate(contents c, std::mt19937_64& rng, double p) {
  for (auto& b : c)
    for (uint64_t u = 0; u < b.size(); u += 4096)
      if (double(rng() >> 11) * 0x1.0p-53 < p) {
        const uint64_t n = std::min<uint64_t>(4096, b.size() - u);
        for (int k = 0; k < 3; ++k) b[u + rng() % n] ^= uint8_t(1 + rng() % 255);
      }
  return c;
}

checkpoint_buffers views(const checkpoint_manifest& m, contents& c) {
  checkpoint_buffers out;
  for (size_t i = 0; i < m.size(); ++i) out[m[i].name] = host_buffer(c[i].data(), c[i].size());
  return out;
}

// Buffers of the manifest's sizes, filled with `fill`.
contents blank(const checkpoint_manifest& m, uint8_t fill = 0xEE) {
  contents c;
  for (const auto& t : m) c.emplace_back(t.bytes, fill);
  return c;
}

contents load_all(checkpoint_store& s, const load_options& o = {}) {
  contents c = blank(s.manifest());
  s.load(views(s.manifest(), c), o);
  return c;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_HAS(stmt, text)                                           \
  do {                                                                         \
    const std::string _m = error_of([&] { stmt; });                            \
    EXPECT_NE(_m.find(text), std::string::npos) << "error: " << _m;           \
  } while (0)

// Where `needle` (64 bytes) is in image[from, to).
uint64_t find(const std::vector<uint8_t>& img, const uint8_t* needle, uint64_t from, uint64_t to, uint64_t n = 64) {
  for (uint64_t i = from; i + n <= to; ++i)
    if (std::memcmp(img.data() + i, needle, n) == 0) return i;
  ADD_FAILURE() << "pattern not found";
  return 0;
}

}  // namespace

// ---- round trips ----

TEST(Checkpoint, SaveThenLoadGivesTheBuffersBack) {
  rig r;
  std::mt19937_64 rng(1);
  const auto m = test_manifest();
  auto s = checkpoint_store::create(r.cache, r.ns, m, small_opts());
  EXPECT_EQ(s->generation(), 0u);
  EXPECT_EQ(s->unit(), 4096u);
  contents c = random_contents(m, rng);
  const save_report rep = s->save(views(m, c));
  EXPECT_EQ(rep.generation, 1u);
  EXPECT_EQ(rep.slot, 1u);
  EXPECT_EQ(rep.data_bytes, 10000u + 300 + 3 * 4096 + 100);
  EXPECT_EQ(rep.units_total, 3u + 1 + 0 + 4);
  EXPECT_EQ(rep.units_written, rep.units_total);
  EXPECT_FALSE(rep.incremental);
  EXPECT_EQ(s->generation(), 1u);
  EXPECT_EQ(load_all(*s), c);
  // A second generation into the other slot, read back in the same process.
  contents c2 = mutate(c, rng, 0.5);
  EXPECT_EQ(s->save(views(m, c2)).slot, 0u);
  EXPECT_EQ(load_all(*s), c2);
  s->verify();
}

TEST(Checkpoint, ANewProcessReadsWhatWasSaved) {
  rig r;
  std::mt19937_64 rng(2);
  const auto m = test_manifest();
  contents c = random_contents(m, rng);
  {
    auto s = checkpoint_store::create(r.cache, r.ns, m, small_opts());
    for (int g = 0; g < 3; ++g) {
      c = mutate(c, rng, 0.5);
      s->save(views(m, c));
    }
  }
  r.down();
  r.disk->cut({});  // only what was made durable
  r.disk->revive();
  r.up();
  auto s = checkpoint_store::open(r.cache, r.ns, m, small_opts());
  EXPECT_EQ(s->generation(), 3u);
  EXPECT_EQ(s->manifest(), m);
  EXPECT_EQ(load_all(*s), c);
}

// Only units that differ from what the slot holds are written: counted in
// the report and in the writes that reach the disk.
TEST(Checkpoint, IncrementalSavesWriteOnlyChangedUnits) {
  rig r;
  std::mt19937_64 rng(3);
  const auto m = test_manifest();
  auto s = checkpoint_store::create(r.cache, r.ns, m, small_opts());
  contents g1 = random_contents(m, rng);
  s->save(views(m, g1));  // slot 1: unknown before, all written
  contents g2 = g1;
  g2[0][5000] ^= 1;       // a unit 1
  g2[3][12300] ^= 1;      // c unit 3 (the short last one)
  const save_report r2 = s->save(views(m, g2));  // slot 0: unknown before
  EXPECT_FALSE(r2.incremental);
  EXPECT_EQ(r2.units_written, 8u);
  contents g3 = g2;
  g3[1][7] ^= 1;  // b
  const uint64_t writes_before = r.ctl->total_counters().writes;
  const save_report r3 = s->save(views(m, g3));  // slot 1 holds g1: a1, c3, b differ
  EXPECT_TRUE(r3.incremental);
  EXPECT_EQ(r3.units_written, 3u);
  // invalidation + 3 units (a unit each: one page each) + the table's unit + the superblock
  // changed bytes (a unit 1, all of b, c's short unit 3), the table (one unit of 64 + 8 x 8 bytes), the
  // copy blanked and written
  EXPECT_EQ(r3.bytes_written, (4096u + 300 + 100) + (64 + 8 * 8) + 2 * 512);
  EXPECT_EQ(r.ctl->total_counters().writes - writes_before, 6u)
      << "pages written: copy 1 blanked, a's unit 1, b (with a's tail), c's unit 3, the table, copy 1";
  const save_report r4 = s->save(views(m, g3));  // slot 0 holds g2: b differs
  EXPECT_EQ(r4.units_written, 1u);
  const save_report r5 = s->save(views(m, g3));  // slot 1 holds g3: nothing
  EXPECT_EQ(r5.units_written, 0u);
  EXPECT_EQ(load_all(*s), g3);
  EXPECT_EQ(s->generation(), 5u);
}

// A store larger than its cache (pages evicted while the save writes and
// the load reads), several threads, whole units overwritten without a read
// (each filled from the bytes being written): what is loaded is what was
// saved, generation after generation.
TEST(Checkpoint, AStoreLargerThanItsCacheRoundTripsEveryGeneration) {
  const checkpoint_manifest m = {{"weight", 1 << 20, "float32", {1 << 18}},
                                 {"bias", 4000, "float32", {1000}},
                                 {"step", 8, "int64", {}},
                                 {"odd", 3 * 4096 + 77, "uint8", {3 * 4096 + 77}}};
  cache_config c;  // as the GPU suite's rig: 512 pages, 8 queue pairs of the default depth
  c.page_size = 4096;
  c.capacity_bytes = 512ull * 4096;
  c.queue_pairs = 8;
  rig r(make_volatile_cache_target(checkpoint_store::bytes_needed(m, 4096) + R), 512, 4096, c);
  std::mt19937_64 rng(3);
  checkpoint_options o = small_opts();
  o.threads = 4;
  auto s = checkpoint_store::create(r.cache, r.ns, m, o);
  contents g = random_contents(m, rng);
  for (int gen = 1; gen <= 6; ++gen) {
    s->save(views(m, g));
    ASSERT_EQ(load_all(*s), g) << "generation " << gen;
    g = mutate(g, rng, 0.1);
  }
}

// After a restart the slot the newest checkpoint does not use is trusted
// (its superblock copy is intact), so the first save is incremental too.
TEST(Checkpoint, IncrementalAcrossAReopen) {
  rig r;
  std::mt19937_64 rng(4);
  const auto m = test_manifest();
  contents c = random_contents(m, rng);
  {
    auto s = checkpoint_store::create(r.cache, r.ns, m, small_opts());
    s->save(views(m, c));
    s->save(views(m, c));
  }
  r.down();
  r.up();
  auto s = checkpoint_store::open(r.cache, r.ns, small_opts());
  c[0][0] ^= 0xFF;
  const save_report rep = s->save(views(m, c));
  EXPECT_TRUE(rep.incremental);
  EXPECT_EQ(rep.units_written, 1u);
  EXPECT_EQ(load_all(*s), c);
  // A store reopened after a failed save does not trust the slot it was writing.
  r.faults->add_rule(fail_flush_once());
  c[1][0] ^= 0xFF;
  EXPECT_ANY_THROW(s->save(views(m, c)));
  s.reset();
  r.down();
  r.up();
  s = checkpoint_store::open(r.cache, r.ns, small_opts());
  EXPECT_EQ(s->generation(), 3u);
  const save_report again = s->save(views(m, c));
  EXPECT_FALSE(again.incremental);
  EXPECT_EQ(again.generation, 4u);
  EXPECT_EQ(load_all(*s), c);
}

// Failed saves (a flush or a write that fails, at each step) are reported;
// the store goes on: load gives the old checkpoint or the new one whole,
// and the next save and load work.
TEST(Checkpoint, AFailedSaveLeavesTheStoreUsable) {
  rig r;
  std::mt19937_64 rng(5);
  const auto m = test_manifest();
  auto s = checkpoint_store::create(r.cache, r.ns, m, small_opts());
  contents good = random_contents(m, rng);
  s->save(views(m, good));
  s->save(views(m, good));  // generation 2; the next goes to slot 1, copy 1 (live)
  uint64_t gen = 2;
  // A failing save, then load (the old checkpoint or, if its superblock
  // got out, the new one), then a save and load that work.
  auto fail_then_go_on = [&](const fault_rule& f, const char* step, bool then_save) {
    SCOPED_TRACE(step);
    r.faults->add_rule(f);
    contents bad = mutate(good, rng, 0.7);
    const std::string e = error_of([&] { s->save(views(m, bad)); });
    EXPECT_NE(e.find("save of generation " + std::to_string(gen + 1) + ": " + step), std::string::npos) << e;
    const contents got = load_all(*s);
    EXPECT_TRUE(got == good || got == bad);
    if (got == bad) {
      ++gen;
      good = bad;
    }
    EXPECT_EQ(s->generation(), gen);
    if (!then_save) return;
    good = mutate(good, rng, 0.3);
    s->save(views(m, good));
    EXPECT_EQ(s->generation(), ++gen);
    EXPECT_EQ(load_all(*s), good);
  };
  // the flush after blanking copy 1 (step 2); copy 1 is blank after it
  fail_then_go_on(fail_flush_once(), "invalidating superblock copy 1", false);
  // the write of copy 1's new superblock (step 6): the load after it makes
  // the superblocks durable, so the new checkpoint comes out whole
  fail_then_go_on(fail_write_once(R, 512), "persisting superblock copy 1", true);
  // the write-back of the slot (step 5)
  const uint32_t slot = uint32_t((gen + 1) % 2);
  fail_then_go_on(fail_write_once((3 + slot) * R, R), slot ? "persisting slot 1" : "persisting slot 0", true);
  EXPECT_EQ(r.faults->fired(), 3u);
}

// Small chunks: the copy of each chunk overlaps the write-back of the one
// before; the result is the same bytes, and every chunk's write-back is
// durable before the superblock.
TEST(Checkpoint, PipelinedSavesOfManyChunks) {
  rig r(make_volatile_cache_target(disk_bytes), 8);  // 8 pages: evictions too
  std::mt19937_64 rng(12);
  const auto m = test_manifest();
  auto s = checkpoint_store::create(r.cache, r.ns, m, small_opts(3000));
  contents c = random_contents(m, rng);
  for (int g = 0; g < 4; ++g) {
    c = mutate(c, rng, 0.6);
    const uint64_t flushes = r.disk->flushes();
    const save_report rep = s->save(views(m, c));
    EXPECT_GE(r.disk->flushes() - flushes, rep.units_written > 2 ? 3u : 2u);
    EXPECT_EQ(load_all(*s), c);
  }
  s.reset();
  r.down();
  r.disk->cut({});
  r.disk->revive();
  r.up();
  EXPECT_EQ(load_all(*checkpoint_store::open(r.cache, r.ns, m, small_opts())), c);
}

TEST(Checkpoint, PartialLoadAndVerifyFirst) {
  rig r;
  std::mt19937_64 rng(6);
  const auto m = test_manifest();
  auto s = checkpoint_store::create(r.cache, r.ns, m, small_opts());
  contents c = random_contents(m, rng);
  s->save(views(m, c));
  std::vector<uint8_t> only(m[3].bytes, 0);
  s->load({{"c", host_buffer(only.data(), only.size())}}, {.verify_first = true, .partial = true});
  EXPECT_EQ(only, c[3]);
  EXPECT_ERROR_HAS(s->load({{"c", host_buffer(only.data(), only.size())}}), "load: no buffer for 'a'");
}

TEST(Checkpoint, UnitsSmallerAndLargerThanPages) {
  for (uint32_t unit : {512u, 16384u}) {
    rig r;
    std::mt19937_64 rng(unit);
    const auto m = test_manifest();
    checkpoint_options o = small_opts();
    o.unit = unit;
    auto s = checkpoint_store::create(r.cache, r.ns, m, o);
    EXPECT_EQ(s->unit(), unit);
    contents c = random_contents(m, rng);
    s->save(views(m, c));
    c[3][100] ^= 1;
    s->save(views(m, c));
    c[3][100] ^= 2;
    const save_report rep = s->save(views(m, c));
    EXPECT_EQ(rep.units_written, 1u);
    EXPECT_EQ(load_all(*s), c);
  }
}

// ---- bad input: each named in the error ----

TEST(Checkpoint, BadManifestsAndSizes) {
  rig r;
  EXPECT_ERROR_HAS(checkpoint_store::create(r.cache, r.ns, {{"x", 8, "f", {}}, {"x", 8, "f", {}}}),
                   "the name 'x' appears twice");
  EXPECT_ERROR_HAS(checkpoint_store::create(r.cache, r.ns, {{"", 8, "f", {}}}), "empty name");
  EXPECT_ERROR_HAS(checkpoint_store::create(r.cache, r.ns, {{"big", 1 << 20, "f", {}}}),
                   "a store of this manifest needs");
  checkpoint_options o;
  o.unit = 3000;
  EXPECT_ERROR_HAS(checkpoint_store::create(r.cache, r.ns, test_manifest(), o), "unit 3000");
  EXPECT_EQ(checkpoint_store::bytes_needed(test_manifest(), 4096), 5 * R);
  // read-only namespace
  controller ctl;
  const uint32_t ro = ctl.add_namespace({make_host_memory_target(disk_bytes, false), 512, true});
  auto cache = make_host_page_cache(ctl, test::small_cache(64));
  EXPECT_ERROR_HAS(checkpoint_store::create(cache, ro, test_manifest()), "read-only");
}

TEST(Checkpoint, SaveAndLoadRefuseBuffersThatDoNotMatch) {
  rig r;
  const auto m = test_manifest();
  auto s = checkpoint_store::create(r.cache, r.ns, m, small_opts());
  contents c = blank(m);
  EXPECT_ERROR_HAS(s->load(views(m, c)), "no checkpoint has been saved");
  auto v = views(m, c);
  v.erase("b");
  EXPECT_ERROR_HAS(s->save(v), "save: no buffer for 'b' (300 bytes, dtype 'int64', shape (5, 7))");
  v = views(m, c);
  v["zzz"] = host_buffer(c[0].data(), 4);
  EXPECT_ERROR_HAS(s->save(v), "buffer 'zzz' is not in the store's manifest");
  v = views(m, c);
  v["a"].bytes = 9999;
  EXPECT_ERROR_HAS(s->save(v), "buffer 'a' has 9999 bytes; the manifest says 'a' (10000 bytes");
  v = views(m, c);
  v["a"].data = nullptr;
  EXPECT_ERROR_HAS(s->save(v), "buffer 'a' is a null pointer");
  v = views(m, c);
  v["a"].where = memory_kind::device;
  EXPECT_ERROR_HAS(s->save(v), "needs GPU support");
  EXPECT_EQ(s->generation(), 0u);
  // The error names the store.
  EXPECT_ERROR_HAS(s->save(v), "checkpoint store 'faults injected into volatile-cache disk");
}

TEST(Checkpoint, OpenChecksTheManifest) {
  rig r;
  const auto m = test_manifest();
  checkpoint_store::create(r.cache, r.ns, m, small_opts());
  auto changed = [&](auto f) {
    auto e = m;
    f(e);
    return e;
  };
  auto opt = small_opts();
  EXPECT_ERROR_HAS(checkpoint_store::open(r.cache, r.ns, changed([](auto& e) { e[1].name = "B"; }), opt),
                   "it has no buffer 'B'");
  EXPECT_ERROR_HAS(checkpoint_store::open(r.cache, r.ns, changed([](auto& e) { e.pop_back(); }), opt),
                   "it has a buffer 'c' (12388 bytes");
  EXPECT_ERROR_HAS(checkpoint_store::open(r.cache, r.ns, changed([](auto& e) { e[0].bytes = 8; }), opt),
                   "'a' has 10000 bytes, expected 8");
  EXPECT_ERROR_HAS(checkpoint_store::open(r.cache, r.ns, changed([](auto& e) { e[0].dtype = "bfloat16"; }), opt),
                   "'a' has dtype 'float32', expected 'bfloat16'");
  EXPECT_ERROR_HAS(checkpoint_store::open(r.cache, r.ns, changed([](auto& e) { e[1].shape = {35}; }), opt),
                   "'b' has shape (5, 7), expected (35,)");
  EXPECT_ERROR_HAS(checkpoint_store::open(r.cache, r.ns, changed([](auto& e) { std::swap(e[0], e[1]); }), opt),
                   "another order");
  EXPECT_NO_THROW(checkpoint_store::open(r.cache, r.ns, m, opt));
}

TEST(Checkpoint, NotAStore) {
  {
    rig r;  // zeroed disk
    EXPECT_ERROR_HAS(checkpoint_store::open(r.cache, r.ns), "both superblock copies are blank");
  }
  std::vector<uint8_t> junk(disk_bytes);
  std::mt19937_64 rng(7);
  for (auto& b : junk) b = uint8_t(rng());
  rig r(make_volatile_cache_target(junk));
  EXPECT_ERROR_HAS(checkpoint_store::open(r.cache, r.ns), "no valid superblock: copy 0: bad magic");
  // Too small a namespace for the store it holds.
  rig big;
  checkpoint_store::create(big.cache, big.ns, test_manifest(), small_opts());
  auto img = big.image();
  img.resize(4 * R);
  rig small(make_volatile_cache_target(img));
  EXPECT_ERROR_HAS(checkpoint_store::open(small.cache, small.ns), "the store needs 327680");
}

// A store on a disk image edited by `edit`, opened in a new process.
struct edited {
  std::unique_ptr<rig> r;
  contents saved[3];
  edited(const std::function<void(std::vector<uint8_t>&)>& edit, int gens = 2) {
    rig w;
    std::mt19937_64 rng(8);
    const auto m = test_manifest();
    auto s = checkpoint_store::create(w.cache, w.ns, m, small_opts());
    saved[0] = random_contents(m, rng);
    for (int g = 1; g <= gens; ++g) {
      saved[g] = mutate(saved[g - 1], rng, 1.0);
      s->save(views(m, saved[g]));
    }
    s.reset();
    auto img = w.image();
    edit(img);
    r = std::make_unique<rig>(make_volatile_cache_target(img));
  }
};

// A flipped or zeroed byte in the newest superblock copy (generation 2,
// copy 0) is corruption of a completed save, not a save that did not
// finish (that leaves the copy blank): open says so rather than quietly
// giving generation 1, and allow_older takes generation 1 on purpose.
TEST(Checkpoint, ACorruptNewestSuperblockIsReported) {
  const std::function<void(std::vector<uint8_t>&)> edits[] = {
      [](std::vector<uint8_t>& img) { img[100] ^= 1; },  // a flipped byte: checksum mismatch
      [](std::vector<uint8_t>& img) { img[0] = 0; },     // a zeroed byte: bad magic
  };
  for (const auto& edit : edits) {
    edited e(edit);
    EXPECT_ERROR_HAS(checkpoint_store::open(e.r->cache, e.r->ns, small_opts()),
                     "the newest superblock is corrupted: superblock copy 0 (slot 0 holds the table of generation 2) "
                     "fails its check: ");
    const std::string m = error_of([&] { checkpoint_store::open(e.r->cache, e.r->ns, small_opts()); });
    EXPECT_NE(m.find("checkpoint store 'faults injected into volatile-cache disk"), std::string::npos) << m;
    EXPECT_NE(m.find("every unit of slot 0 matches that table"), std::string::npos) << m;
    EXPECT_NE(m.find("Generation 1 (copy 1) is intact: to use it, open with allow_older"), std::string::npos) << m;
    auto o = small_opts();
    o.allow_older = true;
    auto s = checkpoint_store::open(e.r->cache, e.r->ns, o);
    EXPECT_EQ(s->generation(), 1u);
    EXPECT_EQ(load_all(*s), e.saved[1]);
    // Saving on from there replaces the corrupt generation; the store is
    // then whole again for anyone.
    contents next = e.saved[2];
    next[0][0] ^= 0x5A;
    EXPECT_EQ(s->save(views(s->manifest(), next)).generation, 2u);
    s.reset();
    EXPECT_EQ(load_all(*checkpoint_store::open(e.r->cache, e.r->ns, small_opts())), next);
  }
}

// The same after one save: the older copy is generation 0 (nothing saved).
TEST(Checkpoint, ACorruptFirstSuperblockIsReported) {
  edited e([](std::vector<uint8_t>& img) { img[R + 300] ^= 0x80; }, 1);
  EXPECT_ERROR_HAS(checkpoint_store::open(e.r->cache, e.r->ns, small_opts()),
                   "the newest superblock is corrupted: superblock copy 1");
  auto o = small_opts();
  o.allow_older = true;
  EXPECT_EQ(checkpoint_store::open(e.r->cache, e.r->ns, o)->generation(), 0u);
}

// A blank newest copy is what a save that did not reach its last step
// leaves (step 2 blanks it durably): the previous checkpoint, silently.
TEST(Checkpoint, ABlankNewestSuperblockFallsBackToThePreviousCheckpoint) {
  edited e([](std::vector<uint8_t>& img) { std::fill(img.begin(), img.begin() + 512, 0); });
  auto s = checkpoint_store::open(e.r->cache, e.r->ns, small_opts());
  EXPECT_EQ(s->generation(), 1u);
  EXPECT_EQ(load_all(*s), e.saved[1]);
}

// The older copy corrupt: the newest is still whole and is what load gives.
TEST(Checkpoint, ACorruptOlderSuperblockIsHarmless) {
  edited e([](std::vector<uint8_t>& img) { img[R + 100] ^= 1; });
  auto s = checkpoint_store::open(e.r->cache, e.r->ns, small_opts());
  EXPECT_EQ(s->generation(), 2u);
  EXPECT_EQ(load_all(*s), e.saved[2]);
}

TEST(Checkpoint, BothSuperblocksTorn) {
  edited e([](std::vector<uint8_t>& img) {
    img[100] ^= 1;
    img[R + 100] ^= 1;
  });
  EXPECT_ERROR_HAS(checkpoint_store::open(e.r->cache, e.r->ns),
                   "no valid superblock: copy 0: checksum mismatch (torn or overwritten); copy 1: checksum mismatch");
}

TEST(Checkpoint, AFormatVersionItDoesNotRead) {
  edited e([](std::vector<uint8_t>& img) {
    for (uint64_t c : {uint64_t(0), R}) {
      uint32_t v = 9;
      std::memcpy(img.data() + c + 8, &v, 4);
      // docs/checkpoints.md: the header checksum covers bytes [0, 504), seed 0x4857434b50545342
      const uint64_t sum = checkpoint_hash::of(img.data() + c, 504, 0x4857434b50545342ull);
      std::memcpy(img.data() + c + 504, &sum, 8);
    }
  });
  EXPECT_ERROR_HAS(checkpoint_store::open(e.r->cache, e.r->ns), "format version 9 (this library reads version 1)");
}

TEST(Checkpoint, ACorruptManifest) {
  edited e([](std::vector<uint8_t>& img) { img[2 * R + 40] ^= 1; });
  EXPECT_ERROR_HAS(checkpoint_store::open(e.r->cache, e.r->ns), "the manifest is corrupt");
}

// A flipped byte in the newest slot: load names the buffer and the unit,
// verify too; with verify_first the buffers are left as they were.
TEST(Checkpoint, ACorruptUnitIsNamed) {
  edited e([](std::vector<uint8_t>&) {});
  // Locate "c" unit 2 of generation 2 in the image, flip a byte, reopen.
  auto img = e.r->image();
  const uint8_t* want = e.saved[2][3].data() + 2 * 4096;
  const uint64_t at = find(img, want, 3 * R, 4 * R);
  img[at + 10] ^= 0x40;
  rig r(make_volatile_cache_target(img));
  auto s = checkpoint_store::open(r.cache, r.ns, small_opts());
  EXPECT_EQ(s->generation(), 2u);
  const std::string expect = "generation 2, buffer 'c': unit 2 (bytes [8192, 12288) of the buffer";
  EXPECT_ERROR_HAS(s->verify(), expect);
  contents c = blank(s->manifest(), 0x11);
  auto v = views(s->manifest(), c);
  EXPECT_ERROR_HAS(s->load(v, {.verify_first = true}), expect);
  EXPECT_EQ(c, blank(s->manifest(), 0x11)) << "verify_first leaves the buffers untouched";
  EXPECT_ERROR_HAS(s->load(v), "the buffers may be partly overwritten");
}

// The newest slot's table replaced by another store's (same manifest):
// load says so rather than reading the other store's data.
TEST(Checkpoint, AnotherStoresData) {
  rig other;
  {
    std::mt19937_64 rng(9);
    auto s = checkpoint_store::create(other.cache, other.ns, test_manifest(), small_opts());
    auto c = random_contents(test_manifest(), rng);
    s->save(views(test_manifest(), c));
    s->save(views(test_manifest(), c));
  }
  const auto theirs = other.image();
  edited e([&](std::vector<uint8_t>& img) {
    // slot 0 (generation 2), data and table, from the other store
    std::memcpy(img.data() + 3 * R, theirs.data() + 3 * R, R);
  });
  auto s = checkpoint_store::open(e.r->cache, e.r->ns, small_opts());
  EXPECT_ERROR_HAS(load_all(*s), "generation 2: slot 0 holds another store's table");
  // A slot table of an older generation (stale) is named too.
  edited stale([&](std::vector<uint8_t>& img) {
    std::vector<uint8_t> t(img.begin() + 4 * R, img.begin() + 5 * R);  // slot 1: generation 1
    std::memcpy(img.data() + 3 * R, t.data(), R);
  });
  auto s2 = checkpoint_store::open(stale.r->cache, stale.r->ns, small_opts());
  EXPECT_ERROR_HAS(load_all(*s2), "holds the table of generation 1 (slot 1");
}

// An incremental save skips units whose hash equals the one the idle slot's
// table records; it must not take the table's word for the bytes: here the
// idle slot (generation 1) is corrupt on the disk, and generation 3 has the
// same data, so every hash matches. The save rewrites what is corrupt.
TEST(Checkpoint, AnIncrementalSaveRewritesUnitsCorruptOnTheDisk) {
  rig w;
  std::mt19937_64 rng(21);
  const auto m = test_manifest();
  contents c = random_contents(m, rng);
  {
    auto s = checkpoint_store::create(w.cache, w.ns, m, small_opts());
    s->save(views(m, c));  // generation 1: slot 1
    s->save(views(m, c));  // generation 2: slot 0
  }
  auto img = w.image();
  const uint64_t at = find(img, c[3].data() + 4096, 4 * R, 5 * R);  // 'c' unit 1 in slot 1
  img[at + 7] ^= 0x10;
  img[4 * R + 20] = 0;  // and 'a' unit 0 zeroed there
  rig r(make_volatile_cache_target(img));
  {
    auto s = checkpoint_store::open(r.cache, r.ns, m, small_opts());
    const save_report rep = s->save(views(m, c));  // generation 3: slot 1
    EXPECT_EQ(rep.generation, 3u);
    EXPECT_TRUE(rep.incremental);
    EXPECT_EQ(rep.units_written, 2u) << "the two corrupt units, and only them";
    EXPECT_EQ(load_all(*s), c);
  }
  r.down();
  r.disk->cut({});
  r.disk->revive();
  r.up();
  auto s = checkpoint_store::open(r.cache, r.ns, m, small_opts());
  EXPECT_EQ(s->generation(), 3u);
  EXPECT_EQ(load_all(*s), c);
}

// One flipped or zeroed byte anywhere in a store of two generations: open
// and load give generation 2 bit for bit, or throw; never other bytes. Every
// byte of both superblock copies, of the manifest and of both tables' first
// 128 bytes, and every 31st byte of the whole store (data of both slots).
TEST(Checkpoint, EveryFlippedOrZeroedByteGivesAnErrorOrTheLastCheckpoint) {
  const auto m = test_manifest();
  const uint64_t store = checkpoint_store::bytes_needed(m, 4096);
  auto mem = make_host_memory_target(store);
  auto* bytes = static_cast<uint8_t*>(mem->host_pointer());
  ASSERT_NE(bytes, nullptr);
  controller ctl;
  const uint32_t ns = ctl.add_namespace({mem, 512, false});
  auto cache = make_host_page_cache(ctl, test::small_cache(128));
  std::mt19937_64 rng(22);
  contents g1 = random_contents(m, rng), g2 = mutate(g1, rng, 1.0);
  {
    auto s = checkpoint_store::create(cache, ns, m, small_opts());
    s->save(views(m, g1));
    s->save(views(m, g2));
  }
  ASSERT_EQ(cache->flush().ok(), true);
  const std::vector<uint8_t> pristine(bytes, bytes + store);
  // A slot: 'a' [0, 10000), 'b' at 10240, 'c' [12288, 24676), the table at 28672 (a unit boundary).
  const uint64_t table = 28672;
  std::vector<uint64_t> where;
  const uint64_t stride = test::scale_div > 1 ? 7 : 1;  // a seventh of the bytes under ThreadSanitizer
  for (uint64_t i = 0; i < 512; i += stride) where.insert(where.end(), {i, R + i});
  for (uint64_t i = 0; i < 512; i += stride) where.push_back(2 * R + i);
  for (uint64_t i = 0; i < 128; i += stride) where.insert(where.end(), {3 * R + table + i, 4 * R + table + i});
  for (uint64_t i = 0; i < store; i += 31 * stride) where.push_back(i);
  uint64_t cases = 0, errors = 0, loaded = 0;
  for (const uint64_t at : where)
    for (int zero = 0; zero < 2; ++zero) {
      const uint8_t was = pristine[at], now = zero ? 0 : uint8_t(was ^ 0x20);
      if (now == was) continue;
      bytes[at] = now;
      ASSERT_TRUE(cache->clear().ok());  // what the next open reads comes from the bytes
      ++cases;
      contents got;
      const std::string e = error_of([&] { got = load_all(*checkpoint_store::open(cache, ns, small_opts())); });
      if (e != "(no error)") {
        ++errors;
      } else {
        ++loaded;
        ASSERT_TRUE(got == g2) << "byte " << at << (zero ? " zeroed" : " flipped") << ": load gave other bytes";
      }
      bytes[at] = was;
    }
  EXPECT_GT(errors, 0u);
  EXPECT_GT(loaded, 0u);
  std::printf("[ sweep ] %llu corrupted images: %llu errors, %llu loaded generation 2 whole\n",
              static_cast<unsigned long long>(cases), static_cast<unsigned long long>(errors),
              static_cast<unsigned long long>(loaded));
}

// ---- the C ABI: files ----

namespace {

struct temp_dir {
  std::string path;
  temp_dir() {
    std::string t = "/tmp/deepwell-ckpt-XXXXXX";
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    path = t;
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
};

dw_checkpoint_options c_options(const std::string& path, int32_t mode) {
  dw_checkpoint_options o;
  dw_checkpoint_options_init(&o);
  o.path = path.c_str();
  o.mode = mode;
  o.cache.page_size = 4096;
  o.cache.cache_bytes = 1 << 20;
  o.cache.cpu_threads = 2;
  return o;
}

}  // namespace

// An empty file is not a store: an I/O error (DW_EIO) naming the file.
TEST(CheckpointFile, AnEmptyFileIsAnIOError) {
  temp_dir d;
  const std::string path = d.path + "/empty.ckpt";
  std::ofstream(path).close();
  const dw_checkpoint_options o = c_options(path, DW_CHECKPOINT_OPEN);
  dw_checkpoint* c = nullptr;
  EXPECT_EQ(dw_checkpoint_open(&o, nullptr, 0, &c), DW_EIO) << dw_last_error();
  const std::string msg = dw_last_error();
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("is empty (0 bytes): not a deepwell checkpoint store"), std::string::npos) << msg;
  EXPECT_EQ(c, nullptr);
}

// The newest superblock corrupt in a file: DW_EIO naming the file, and
// allow_older opens the previous generation.
TEST(CheckpointFile, ACorruptNewestSuperblockAndAllowOlder) {
  temp_dir d;
  const std::string path = d.path + "/run.ckpt";
  std::vector<uint8_t> w(5000, 1);
  const int64_t shape[1] = {5000};
  const dw_checkpoint_tensor t[1] = {{"w", "uint8", shape, 1, 5000}};
  {
    const dw_checkpoint_options o = c_options(path, DW_CHECKPOINT_CREATE);
    dw_checkpoint* c = nullptr;
    ASSERT_EQ(dw_checkpoint_open(&o, t, 1, &c), DW_OK) << dw_last_error();
    void* data[1] = {w.data()};
    ASSERT_EQ(dw_checkpoint_save(c, data, nullptr, 1, nullptr), DW_OK) << dw_last_error();
    w.assign(5000, 2);
    ASSERT_EQ(dw_checkpoint_save(c, data, nullptr, 1, nullptr), DW_OK) << dw_last_error();  // copy 0
    ASSERT_EQ(dw_checkpoint_close(c), DW_OK);
  }
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64);
    f.put(char(0x7F));
  }
  dw_checkpoint_options o = c_options(path, DW_CHECKPOINT_OPEN);
  o.writable = 0;
  dw_checkpoint* c = nullptr;
  EXPECT_EQ(dw_checkpoint_open(&o, nullptr, 0, &c), DW_EIO);
  const std::string msg = dw_last_error();
  EXPECT_NE(msg.find("checkpoint store '" + path + "': the newest superblock is corrupted"), std::string::npos) << msg;
  o.allow_older = 1;
  ASSERT_EQ(dw_checkpoint_open(&o, nullptr, 0, &c), DW_OK) << dw_last_error();
  uint64_t g = 0;
  EXPECT_EQ(dw_checkpoint_generation(c, &g), DW_OK);
  EXPECT_EQ(g, 1u);
  std::vector<uint8_t> got(5000, 0);
  void* data[1] = {got.data()};
  EXPECT_EQ(dw_checkpoint_load(c, data, nullptr, 1, 1), DW_OK) << dw_last_error();
  EXPECT_EQ(got, std::vector<uint8_t>(5000, 1));
  EXPECT_EQ(dw_checkpoint_close(c), DW_OK);
}

// ---- power cuts ----

namespace {

struct crash_totals {
  int runs = 0, cut_in_save = 0, got_new = 0, got_old = 0, nothing_saved = 0;
};

// One run: create, then `gens` saves of changing buffers, with the power
// cut at request `cut_at` (0: never during the run; then after it). Then
// revive, reopen, load and check; then two more saves and loads on the
// revived disk.
void crash_run(power_cut how, uint64_t cut_at, uint64_t seed, int gens, crash_totals& tot, uint64_t* requests_out) {
  rig r;
  std::mt19937_64 rng(seed);
  const auto m = test_manifest();
  std::vector<contents> gen_data(1);
  gen_data[0] = random_contents(m, rng);
  if (cut_at) r.disk->cut_at_request(cut_at, how);
  uint64_t returned = 0, attempted = 0;
  {
    std::unique_ptr<checkpoint_store> s;
    try {
      s = checkpoint_store::create(r.cache, r.ns, m, small_opts(seed % 2 ? 5000 : 32ull << 20));
      for (int g = 1; g <= gens; ++g) {
        const double p = (g % 3 == 0) ? 0.0 : (g % 3 == 1 ? 0.3 : 1.0);
        gen_data.push_back(mutate(gen_data.back(), rng, p));
        attempted = g;
        const save_report rep = s->save(views(m, gen_data.back()));
        ASSERT_EQ(rep.generation, uint64_t(g));
        returned = g;
      }
      attempted = 0;
    } catch (const error&) {
      ASSERT_TRUE(r.disk->dead()) << "a save failed on a live disk";
    }
  }
  if (requests_out) *requests_out = r.disk->requests();
  ++tot.runs;
  if (attempted) ++tot.cut_in_save;
  r.down();
  r.disk->cut(how);  // if the armed cut never came: now
  r.disk->revive();
  r.up();
  std::unique_ptr<checkpoint_store> s;
  try {
    s = checkpoint_store::open(r.cache, r.ns, m, small_opts());
  } catch (const error& e) {
    ASSERT_EQ(returned, 0u) << "open failed after generation " << returned << " was saved: " << e.what();
    ++tot.nothing_saved;
    return;
  }
  const uint64_t g = s->generation();
  if (g == 0) {
    ASSERT_EQ(returned, 0u) << "generation " << returned << " was saved, the store has none";
    ++tot.nothing_saved;
  } else {
    ASSERT_TRUE(g == returned || (attempted && g == attempted))
        << "store at generation " << g << "; returned " << returned << ", attempted " << attempted;
    contents got;
    const std::string e = error_of([&] { got = load_all(*s); });
    ASSERT_EQ(e, "(no error)") << "generation " << g;
    ASSERT_TRUE(got == gen_data[g]) << "generation " << g << " loaded other bytes (a mix?)";
    (g == returned ? tot.got_old : tot.got_new)++;
  }
  // The store goes on after the crash: incremental saves into both slots.
  contents next = g ? gen_data[g] : gen_data[0];
  for (int k = 0; k < 2; ++k) {
    next = mutate(next, rng, 0.3);
    s->save(views(m, next));
    ASSERT_EQ(s->generation(), g + k + 1);
    ASSERT_TRUE(load_all(*s) == next) << "after the crash, save " << k;
  }
}

void crash_campaign(power_cut::mode_t mode, int points) {
  constexpr int gens = 5;
  crash_totals tot;
  uint64_t total = 0, piped = 0;  // the requests of a whole run (even seeds: one chunk; odd: many)
  crash_run({mode, 1, 0.5}, 0, 1000, gens, tot, &total);
  crash_run({mode, 1, 0.5}, 0, 1001, gens, tot, &piped);
  ASSERT_GT(total, 20u);
  ASSERT_GT(piped, total);
  total = piped;
  std::mt19937_64 rng(77 + mode);
  for (int i = 0; i < points; ++i) {
    power_cut how;
    how.mode = mode;
    how.seed = rng();
    const double fractions[] = {0.0, 0.25, 0.5, 0.9, 1.0};
    how.keep_fraction = fractions[rng() % 5];
    const uint64_t at = 1 + rng() % (total + 2);
    SCOPED_TRACE("cut at request " + std::to_string(at) + " of about " + std::to_string(total) + ", keep " +
                 std::to_string(how.keep_fraction) + ", seed " + std::to_string(how.seed));
    crash_run(how, at, 1000 + i, gens, tot, nullptr);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // The campaign reached every case.
  EXPECT_EQ(tot.runs, points + 2);
  EXPECT_GT(tot.cut_in_save, points / 2);
  EXPECT_GT(tot.got_old, 0);
  EXPECT_GT(tot.nothing_saved, 0);
  std::printf("[ campaign ] mode %d: %d runs, %d cut during a save, %d loaded the last returned, %d the one in "
              "progress, %d nothing saved (about %llu requests a run)\n",
              int(mode), tot.runs, tot.cut_in_save, tot.got_old, tot.got_new, tot.nothing_saved,
              static_cast<unsigned long long>(total));
}

}  // namespace

TEST(CheckpointCrash, DropAll) { crash_campaign(power_cut::drop_all, 80); }
TEST(CheckpointCrash, KeepRandom) { crash_campaign(power_cut::keep_random, 80); }
TEST(CheckpointCrash, Torn) { crash_campaign(power_cut::torn, 80); }
