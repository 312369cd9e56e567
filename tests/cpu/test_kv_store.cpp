// The key-value store (durable/kv_store.hpp) on CPU threads and on emulated
// 32-lane warps (the GPU's code path: packed log rows, warp scans, claims
// among lanes): batches of random SET / DELETE against a std::unordered_map
// model with every GET checked; full tables, bad keys, overflow chains and
// reused tombstones; the header's checks (another shape, corruption, not a
// store, truncation), each naming the file; checkpoints when the log fills;
// ops staged by threads. And the crash suite: a workload of mixed batches
// on a disk with a volatile write cache (crash_target.hpp) cut at a random
// request in each power-cut mode; after each cut the disk is revived, a new
// controller and cache open the store (recovery), and the table must equal
// the model after a prefix of the batches that holds every batch whose call
// returned (and at most the one in flight besides).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/kv_store.hpp"
#include "deepwell/targets/crash_target.hpp"
#include "cache_test_support.hpp"
#include "kv_test_support.hpp"
#include "test_util.hpp"
#include "warp_emulator.hpp"

using namespace deepwell;
using namespace deepwell::durable;
using namespace deepwell::kv_test;

namespace {

// Warps of 32 emulated lanes (threads meeting at barriers) as the store's
// executor on a host cache: the GPU kernels' code path, on the CPU.
class emulated_executor final : public kv_executor {
 public:
  explicit emulated_executor(unsigned parallel_warps = 2) : par_(parallel_warps) {}
  uint32_t lanes() const override { return 32; }
  void* alloc(uint64_t bytes) override { return ::operator new(bytes); }
  void free(void* p) override { ::operator delete(p); }
  void zero(void* p, uint64_t bytes) override { std::memset(p, 0, bytes); }
  void to_device(void* d, const void* s, uint64_t n) override { std::memcpy(d, s, n); }
  void to_host(void* d, const void* s, uint64_t n) override { std::memcpy(d, s, n); }
  void device_copy(void* d, const void* s, uint64_t n) override { std::memmove(d, s, n); }
  void check_device_pointer(const void*, const char*) override {}
  void run(const page_cache& cache, kv_phase ph, const kv_detail::batch& b, uint32_t rows, uint64_t entries) override {
    if (ph == kv_phase::dedup) {
      for (uint64_t i = 0; i < b.n; ++i) kv_detail::dedup_op(b, i);
      return;
    }
    if (ph == kv_phase::commit) {
      test::run_warp(~0u, 0, [&](test::emulated_warp w) { kv_detail::commit(w, b, rows, entries); });
      return;
    }
    cache.check_capacity(par_);
    const uint64_t warps = (b.n + 31) / 32;
    for (uint64_t w0 = 0; w0 < warps; w0 += par_) {
      std::vector<std::thread> ts;
      for (uint64_t k = w0; k < std::min<uint64_t>(warps, w0 + par_); ++k)
        ts.emplace_back([&, k] {
          test::run_warp(~0u, uint32_t(k), [&](test::emulated_warp w) {
            const uint64_t i = k * 32 + w.lane();
            if (ph == kv_phase::plan_and_log)
              kv_detail::plan_and_log(w, b, i, i < b.n);
            else
              kv_detail::get_ops(w, b, i, i < b.n);
          });
        });
      for (auto& t : ts) t.join();
    }
  }

 private:
  unsigned par_;
};

// A store on a volatile-cache disk (no power cuts here unless a test makes them).
struct rig {
  std::shared_ptr<volatile_cache_target> disk;
  std::unique_ptr<controller> ctl;
  std::shared_ptr<page_cache> cache;
  std::unique_ptr<kv_store> kv;
  kv_config cfg;
  kv_options opts;
  uint64_t cache_pages;

  rig(const kv_config& c, uint64_t pages, std::shared_ptr<kv_executor> ex = nullptr, uint64_t max_batch = 4096)
      : cfg(c), cache_pages(pages) {
    opts.executor = std::move(ex);
    opts.max_batch = max_batch;
    opts.cpu_threads = 2;
    disk = make_volatile_cache_target(kv_store::bytes_needed(cfg));
    power_on();
    kv = std::make_unique<kv_store>(kv_store::create(cache, ctl->add_namespace({disk, 512, false}), cfg, opts, true));
  }
  void power_on() {
    ctl = std::make_unique<controller>(quiet_controller());
    cache = make_host_page_cache(*ctl, test::small_cache(cache_pages));
  }
  void power_off() {
    kv.reset();
    cache.reset();
    ctl.reset();
  }
  void reopen() {
    power_off();
    power_on();
    kv = std::make_unique<kv_store>(kv_store::open(cache, ctl->add_namespace({disk, 512, false}), {}, opts));
  }
};

void check_result(const kv_batch_result& r, const expected& e, const std::vector<uint8_t>& st) {
  EXPECT_EQ(r.inserted, e.inserted);
  EXPECT_EQ(r.updated, e.updated);
  EXPECT_EQ(r.erased, e.erased);
  EXPECT_EQ(r.not_found, e.not_found);
  EXPECT_EQ(r.superseded, e.superseded);
  EXPECT_EQ(r.full, 0u);
  for (size_t i = 0; i < st.size(); ++i) ASSERT_EQ(int(st[i]), int(e.status[i])) << "op " << i;
}

// Random batches of SET, DELETE and both, each followed by a GET of every key.
void random_batches(std::shared_ptr<kv_executor> ex, uint32_t batches, uint64_t max_ops, uint64_t universe) {
  kv_config c;
  c.value_bytes = 24;
  c.bucket_bytes = 1024;  // 25 slots a bucket
  c.buckets = 400;        // 10000 slots; 400 KiB of table (100 pages) through a cache of 48 pages
  c.log_rows = 8192;
  const uint32_t vw = c.value_bytes / 8;
  rig r(c, 48, ex);
  std::mt19937_64 rng(42);
  model m;
  for (uint32_t k = 0; k < batches; ++k) {
    const uint64_t n = 1 + rng() % max_ops;
    const uint32_t kind = k % 3;  // set only, erase only, mixed
    op_list b = random_batch(rng, k, universe, vw, n, kind == 0 ? 0.0 : kind == 1 ? 1.0 : 0.3);
    const expected e = apply_to(m, b, vw);
    std::vector<uint8_t> st(n, 99);
    kv_batch_result res;
    if (kind == 0)
      res = r.kv->set(b.keys.data(), b.values.data(), n, kv_memory::host, st.data());
    else if (kind == 1)
      res = r.kv->erase(b.keys.data(), n, kv_memory::host, st.data());
    else
      res = r.kv->apply(b.ops.data(), b.keys.data(), b.values.data(), n, kv_memory::host, st.data());
    SCOPED_TRACE("batch " + std::to_string(k));
    check_result(res, e, st);
    ASSERT_TRUE(gets_match(*r.kv, m, universe, vw));
  }
  EXPECT_GT(r.cache->stats().evictions, 0u);  // the table went through a cache smaller than it
  ASSERT_TRUE(contents_match(*r.kv, m, vw));
  r.reopen();
  ASSERT_TRUE(gets_match(*r.kv, m, universe, vw));
}

}  // namespace

TEST(KvStore, RandomBatchesMatchAModel) { random_batches(nullptr, 30, 400, 1500); }

TEST(KvStore, RandomBatchesMatchAModelOnEmulatedWarps) {
  // 32 threads a warp meeting at barriers on few cores: slow, so small.
  random_batches(std::make_shared<emulated_executor>(1), 4, 100, 200);
}

// Few slots a bucket: keys overflow into the next buckets, deletes leave
// tombstones that later inserts reuse, and lookups still find every key.
TEST(KvStore, OverflowChainsAndReusedTombstones) {
  kv_config c;
  c.value_bytes = 56;  // 64-byte slots
  c.bucket_bytes = 512;  // 8 slots a bucket
  c.buckets = 40;
  c.max_probe = 40;
  const uint32_t vw = 7;
  rig r(c, 48);
  std::mt19937_64 rng(7);
  model m;
  for (uint32_t round = 0; round < 12; ++round) {
    op_list b = random_batch(rng, round, 400, vw, 120, round % 2 ? 0.6 : 0.1);
    const expected e = apply_to(m, b, vw);
    std::vector<uint8_t> st(b.keys.size());
    const kv_batch_result res = r.kv->apply(b.ops.data(), b.keys.data(), b.values.data(), b.keys.size(),
                                            kv_memory::host, st.data());
    EXPECT_EQ(res.full, 0u);
    check_result(res, e, st);
    ASSERT_TRUE(gets_match(*r.kv, m, 400, vw));
  }
  ASSERT_TRUE(contents_match(*r.kv, m, vw));
}

// A full table: the ops that find no slot report kv_full and change
// nothing; the others go in; erasing makes room again.
TEST(KvStore, FullTableReportsFullAndChangesNothing) {
  kv_config c;
  c.value_bytes = 8;
  c.bucket_bytes = 512;  // 32 slots of 16 bytes
  c.buckets = 2;
  c.max_probe = 2;
  rig r(c, 48);
  std::vector<uint64_t> keys(100), values(100);
  for (uint64_t i = 0; i < 100; ++i) keys[i] = 1000 + i, values[i] = i * 3;
  std::vector<uint8_t> st(100);
  const kv_batch_result res = r.kv->set(keys.data(), values.data(), 100, kv_memory::host, st.data());
  EXPECT_EQ(res.inserted, 64u);
  EXPECT_EQ(res.full, 36u);
  model m;
  for (uint64_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(st[i] == kv_ok || st[i] == kv_full);
    if (st[i] == kv_ok) m[keys[i]] = {values[i]};
  }
  std::vector<uint64_t> out(100);
  std::vector<uint8_t> gst(100);
  r.kv->get(keys.data(), out.data(), 100, kv_memory::host, gst.data());
  for (uint64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(gst[i], st[i] == kv_ok ? kv_ok : kv_not_found) << i;
    if (st[i] == kv_ok) EXPECT_EQ(out[i], values[i]);
  }
  // Erase ten, then the full ones fit ten at a time.
  std::vector<uint64_t> gone;
  for (auto& [k, v] : m)
    if (gone.size() < 10) gone.push_back(k);
  EXPECT_EQ(r.kv->erase(gone.data(), gone.size()).erased, 10u);
  std::vector<uint64_t> retry, rv;
  for (uint64_t i = 0; i < 100; ++i)
    if (st[i] == kv_full) retry.push_back(keys[i]), rv.push_back(values[i]);
  const kv_batch_result again = r.kv->set(retry.data(), rv.data(), retry.size());
  EXPECT_EQ(again.inserted, 10u);
  EXPECT_EQ(again.full, retry.size() - 10);
  std::vector<uint64_t> ck;
  std::vector<uint8_t> cv;
  r.kv->contents(ck, cv);
  EXPECT_EQ(ck.size(), 64u);
}

TEST(KvStore, BadKeysAreReportedAndSkipped) {
  kv_config c;
  c.value_bytes = 8;
  c.buckets = 4;
  rig r(c, 48);
  const uint64_t keys[4] = {0, kv_format::max_key, kv_format::max_key + 1, ~0ull};
  const uint64_t values[4] = {10, 11, 12, 13};
  uint8_t st[4];
  const kv_batch_result res = r.kv->set(keys, values, 4, kv_memory::host, st);
  EXPECT_EQ(res.inserted, 2u);
  EXPECT_EQ(res.bad_key, 2u);
  EXPECT_EQ(st[0], kv_ok);
  EXPECT_EQ(st[1], kv_ok);
  EXPECT_EQ(st[2], kv_bad_key);
  EXPECT_EQ(st[3], kv_bad_key);
  uint64_t out[4];
  r.kv->get(keys, out, 4, kv_memory::host, st);
  EXPECT_EQ(out[0], 10u);
  EXPECT_EQ(out[1], 11u);
  EXPECT_EQ(st[2], kv_bad_key);
}

// Batches committed and never checkpointed come back at open (redo replay).
TEST(KvStore, ReopenReplaysCommittedBatchesFromAFile) {
  test::scratch_file f("t.kv");
  kv_config c;
  c.value_bytes = 16;
  c.capacity = 5000;
  c.log_rows = 4096;
  model m;
  {
    controller ctl(quiet_controller());
    auto cache = make_host_page_cache(ctl, test::small_cache(64));
    kv_store kv = kv_store::create_file(cache, f.path(), c);
    std::mt19937_64 rng(3);
    for (uint32_t k = 0; k < 5; ++k) {
      op_list b = random_batch(rng, k, 3000, 2, 200);
      apply_to(m, b, 2);
      kv.apply(b.ops.data(), b.keys.data(), b.values.data(), b.keys.size());
    }
    EXPECT_EQ(kv.checkpoints(), 0u);
  }  // the cache's dirty pages are dropped with it: only the log has the batches
  controller ctl(quiet_controller());
  auto cache = make_host_page_cache(ctl, test::small_cache(64));
  kv_store kv = kv_store::open_file(cache, f.path(), {8, 16});
  EXPECT_EQ(kv.last_recovery().replayed, 5u);
  EXPECT_TRUE(gets_match(kv, m, 3000, 2));
  EXPECT_TRUE(contents_match(kv, m, 2));
}

TEST(KvStore, AnotherShapeIsRefusedNamingTheFile) {
  test::scratch_file f("shape.kv");
  {
    controller ctl(quiet_controller());
    auto cache = make_host_page_cache(ctl, test::small_cache(64));
    kv_store::create_file(cache, f.path(), {.value_bytes = 32, .capacity = 100});
  }
  controller ctl(quiet_controller());
  auto cache = make_host_page_cache(ctl, test::small_cache(64));
  try {
    kv_store::open_file(cache, f.path(), {.key_bytes = 8, .value_bytes = 64});
    FAIL() << "opened a store of 32-byte values as one of 64";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find(f.path()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("values are 32 bytes; opened expecting 64-byte values"), std::string::npos)
        << e.what();
  }
  try {
    kv_store::open_file(cache, f.path(), {.key_bytes = 16});
    FAIL() << "opened a store of 8-byte keys as one of 16";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("keys are 8 bytes"), std::string::npos) << e.what();
  }
  kv_store ok = kv_store::open_file(cache, f.path(), {.value_bytes = 32});
  EXPECT_EQ(ok.info().value_bytes, 32u);
}

TEST(KvStore, CorruptedHeaderIsRefusedNamingTheFile) {
  test::scratch_file f("bad.kv");
  {
    controller ctl(quiet_controller());
    auto cache = make_host_page_cache(ctl, test::small_cache(64));
    kv_store::create_file(cache, f.path(), {.value_bytes = 16, .capacity = 100});
  }
  auto expect_refused = [&](const std::string& what) {
    controller ctl(quiet_controller());
    auto cache = make_host_page_cache(ctl, test::small_cache(64));
    try {
      kv_store::open_file(cache, f.path());
      ADD_FAILURE() << "opened a store with " << what;
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find(f.path()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto poke = [&](uint64_t at, uint8_t x) {
    std::fstream s(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    char c;
    s.seekg(at);
    s.read(&c, 1);
    c = char(uint8_t(c) ^ x);
    s.seekp(at);
    s.write(&c, 1);
  };
  poke(offsetof(kv_format::superblock, value_bytes), 0x40);  // 16 -> 80
  expect_refused("corrupted kv header");
  poke(offsetof(kv_format::superblock, value_bytes), 0x40);  // back
  poke(offsetof(kv_format::superblock, version), 0x04);
  expect_refused("kv format version 6");
  poke(offsetof(kv_format::superblock, version), 0x04);
  poke(0, 0xFF);
  expect_refused("not a deepwell kv store");
  poke(0, 0xFF);
  {  // intact again
    controller ctl(quiet_controller());
    auto cache = make_host_page_cache(ctl, test::small_cache(64));
    kv_store::open_file(cache, f.path());
  }
  ASSERT_EQ(::truncate(f.path().c_str(), 200 << 10), 0);
  expect_refused("truncated");
}

TEST(KvStore, BadConfigurationsAndBatchesAreRefused) {
  EXPECT_THROW(kv_store::bytes_needed({.value_bytes = 12}), error);
  EXPECT_THROW(kv_store::bytes_needed({.value_bytes = 136}), error);
  EXPECT_THROW(kv_store::bytes_needed({.value_bytes = 8, .bucket_bytes = 3000}), error);
  kv_config c;
  c.value_bytes = 8;
  c.buckets = 4;
  c.log_rows = 64;  // a batch of 63 ops on CPU threads at most (a row an op, one for the commit)
  rig r(c, 48);
  EXPECT_EQ(r.kv->info().max_batch, 63u);
  std::vector<uint64_t> keys(64, 1), values(64, 1);
  try {
    r.kv->set(keys.data(), values.data(), 64);
    FAIL() << "a batch too large for the log";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("a batch of 64 ops; at most 63"), std::string::npos) << e.what();
  }
  EXPECT_THROW(r.kv->set(keys.data(), values.data(), 2, kv_memory::device), error);  // no device here
  EXPECT_EQ(r.kv->set(keys.data(), values.data(), 63).inserted, 1u);
}

// A small log: checkpoints run by themselves, and nothing is lost across them.
TEST(KvStore, CheckpointsWhenTheLogFills) {
  kv_config c;
  c.value_bytes = 8;
  c.buckets = 16;
  c.log_rows = 150;  // a row an op on CPU threads: a checkpoint every batch or two
  rig r(c, 48);
  std::mt19937_64 rng(11);
  model m;
  uint64_t checkpointed = 0;
  for (uint32_t k = 0; k < 20; ++k) {
    op_list b = random_batch(rng, k, 800, 1, 100);
    apply_to(m, b, 1);
    checkpointed += r.kv->apply(b.ops.data(), b.keys.data(), b.values.data(), b.keys.size()).checkpointed;
  }
  EXPECT_GE(checkpointed, 5u);
  EXPECT_EQ(r.kv->checkpoints(), checkpointed);
  ASSERT_TRUE(gets_match(*r.kv, m, 800, 1));
  r.reopen();
  ASSERT_TRUE(gets_match(*r.kv, m, 800, 1));
}

// Threads stage ops through kv_stage_ref (as kernels do); one commit makes
// them a batch.
TEST(KvStore, StagedOpsBecomeOneBatch) {
  kv_config c;
  c.value_bytes = 16;
  c.buckets = 8;
  rig r(c, 48, nullptr, 256);
  const kv_stage_ref s = r.kv->stage();
  EXPECT_EQ(s.capacity, 256u);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (uint64_t k = 0; k < 50; ++k) {
        const uint64_t v[2] = {uint64_t(t) * 1000 + k, k};
        EXPECT_TRUE(s.set(uint64_t(t) * 100 + k, v));
      }
    });
  for (auto& t : ts) t.join();
  kv_batch_result res = r.kv->commit_staged();
  EXPECT_EQ(res.ops, 200u);
  EXPECT_EQ(res.inserted, 200u);
  EXPECT_EQ(res.dropped, 0u);
  for (uint64_t k = 0; k < 100; ++k) EXPECT_TRUE(s.erase(k));  // thread 0's keys
  for (uint64_t k = 0; k < 200; ++k) s.erase(1000 + k);         // 156 fit
  res = r.kv->commit_staged();
  EXPECT_EQ(res.erased, 50u);
  EXPECT_EQ(res.not_found, 206u);
  EXPECT_EQ(res.dropped, 44u);
  model m;
  for (uint64_t t = 1; t < 4; ++t)
    for (uint64_t k = 0; k < 50; ++k) m[t * 100 + k] = {t * 1000 + k, k};
  ASSERT_TRUE(gets_match(*r.kv, m, 400, 2));
  EXPECT_EQ(r.kv->commit_staged().ops, 0u);
}

// ---------------------------------------------------------------------------
// Power cuts

namespace {

struct workload {
  uint32_t vw;
  uint64_t universe;
  std::vector<op_list> batches;
  std::vector<model> after;  // after[k]: the model after the first k batches
};

workload make_workload(uint64_t seed, uint32_t nbatches, uint32_t vw, uint64_t universe, uint64_t max_ops) {
  workload w;
  w.vw = vw;
  w.universe = universe;
  std::mt19937_64 rng(seed);
  model m;
  w.after.push_back(m);
  for (uint32_t k = 0; k < nbatches; ++k) {
    w.batches.push_back(random_batch(rng, k + seed * 1000, universe, vw, 8 + rng() % max_ops));
    apply_to(m, w.batches.back(), vw);
    w.after.push_back(m);
  }
  return w;
}

// The table's contents as a model (read from storage after a checkpoint).
model table_of(kv_store& kv, uint32_t vw, std::string& problem) {
  std::vector<uint64_t> keys;
  std::vector<uint8_t> values;
  kv.contents(keys, values);
  model m;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<uint64_t> v(vw);
    std::memcpy(v.data(), values.data() + i * vw * 8, vw * 8);
    if (!m.emplace(keys[i], v).second) problem = "key " + std::to_string(keys[i]) + " is in the table twice";
  }
  return m;
}

struct crash_setup {
  kv_config cfg;
  uint64_t cache_pages = 40;
  std::shared_ptr<kv_executor> ex;
  uint64_t max_batch = 4096;
};

crash_setup small_store() {
  crash_setup s;
  s.cfg.value_bytes = 16;
  s.cfg.bucket_bytes = 512;  // 21 slots a bucket
  s.cfg.buckets = 64;        // 1344 slots, 8 pages
  s.cfg.max_probe = 64;
  s.cfg.log_rows = 512;      // a checkpoint every few batches (3 rows per op on CPU threads)
  return s;
}

struct trial_outcome {
  uint32_t returned = 0;  // batches whose call returned
  bool cut_fired = false;
  uint32_t matched = 0;   // the prefix the recovered table equals
};

// One trial: a fresh disk, the store created, the cut armed at request n,
// the workload run until a call throws, the power cut (if the armed cut did
// not fire), revive, open (recovery; with cut_in_recovery, a second cut
// during the first recovery and another reopen), and the table compared
// with the models of the prefixes.
trial_outcome run_trial(const crash_setup& s, const workload& w, uint64_t n, power_cut how, uint64_t cut_in_recovery,
                        uint64_t* requests_seen = nullptr) {
  rig r(s.cfg, s.cache_pages, s.ex, s.max_batch);
  trial_outcome out;
  const uint64_t before = r.disk->requests();
  if (n) r.disk->cut_at_request(n, how);
  for (const op_list& b : w.batches) {
    try {
      r.kv->apply(b.ops.data(), b.keys.data(), b.values.data(), b.keys.size());
    } catch (const error&) {
      break;
    }
    ++out.returned;
  }
  if (requests_seen) *requests_seen = r.disk->requests() - before;
  out.cut_fired = r.disk->dead();
  if (!r.disk->dead()) r.disk->cut(how);
  r.power_off();
  r.disk->revive();
  if (cut_in_recovery) {
    r.power_on();
    r.disk->cut_at_request(cut_in_recovery, how);
    try {
      r.kv = std::make_unique<kv_store>(kv_store::open(r.cache, r.ctl->add_namespace({r.disk, 512, false}), {}, r.opts));
    } catch (const error&) {
    }
    if (!r.disk->dead()) r.disk->cut(how);
    r.power_off();
    r.disk->revive();
  }
  r.disk->cut_at_request(0, how);
  r.reopen();
  std::string problem;
  const model got = table_of(*r.kv, w.vw, problem);
  EXPECT_EQ(problem, "");
  bool found = false;
  for (uint32_t k = out.returned; k <= std::min<uint32_t>(out.returned + 1, uint32_t(w.batches.size())); ++k)
    if (got == w.after[k]) {
      found = true;
      out.matched = k;
      break;
    }
  if (!found) {
    ADD_FAILURE() << "after a cut at request " << n << " (mode " << how.mode << ", seed " << how.seed << "), "
                  << out.returned << " batches returned; the recovered table (" << got.size()
                  << " keys) matches no model after " << out.returned << " or " << out.returned + 1 << " batches";
    return out;
  }
  EXPECT_TRUE(gets_match(*r.kv, w.after[out.matched], w.universe, w.vw));
  // The recovered store takes the rest of the workload.
  model m = w.after[out.matched];
  for (uint32_t k = out.matched; k < w.batches.size(); ++k) {
    const op_list& b = w.batches[k];
    apply_to(m, b, w.vw);
    r.kv->apply(b.ops.data(), b.keys.data(), b.values.data(), b.keys.size());
  }
  EXPECT_TRUE(gets_match(*r.kv, m, w.universe, w.vw));
  return out;
}

void crash_suite(const crash_setup& s, uint32_t trials, uint64_t seed, int only_mode = -1, uint32_t nbatches = 8,
                 uint64_t max_ops = 40, uint64_t universe = 600) {
  const workload w = make_workload(seed, nbatches, s.cfg.value_bytes / 8, universe, max_ops);
  uint64_t requests = 0;
  run_trial(s, w, 0, {}, 0, &requests);  // no cut: how many requests the workload makes
  ASSERT_GT(requests, 20u);
  std::mt19937_64 rng(seed * 7 + 1);
  uint32_t fired = 0, middle = 0;
  for (uint32_t t = 0; t < trials; ++t) {
    power_cut how;
    how.mode = power_cut::mode_t(only_mode >= 0 ? only_mode : int(t % 3));
    how.seed = rng();
    how.keep_fraction = 0.5;
    const uint64_t n = 1 + rng() % (requests + requests / 8);
    const uint64_t again = t % 5 == 4 ? 1 + rng() % 40 : 0;
    SCOPED_TRACE("trial " + std::to_string(t) + ": cut at request " + std::to_string(n) + ", mode " +
                 std::to_string(how.mode) + (again ? ", and again at recovery request " + std::to_string(again) : ""));
    const trial_outcome o = run_trial(s, w, n, how, again);
    fired += o.cut_fired;
    middle += o.returned > 0 && o.returned < nbatches;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GE(fired, trials / 2);   // most cuts hit the workload
  EXPECT_GE(middle, trials / 3);  // many between the first batch and the last
}

}  // namespace

TEST(KvCrash, RandomCutsDropAll) { crash_suite(small_store(), 70 / test::scale_div, 1, power_cut::drop_all); }
TEST(KvCrash, RandomCutsKeepRandom) { crash_suite(small_store(), 70 / test::scale_div, 2, power_cut::keep_random); }
TEST(KvCrash, RandomCutsTorn) { crash_suite(small_store(), 70 / test::scale_div, 3, power_cut::torn); }

// The GPU's code path (a warp's entries packed 32 to a log row) under cuts.
TEST(KvCrash, RandomCutsOnEmulatedWarps) {
  crash_setup s = small_store();
  s.ex = std::make_shared<emulated_executor>(1);
  s.cfg.log_rows = 64;  // rows are packed 32 entries each: still a checkpoint every few batches
  crash_suite(s, 5 / test::scale_div + 1, 4, -1, 4, 40, 100);  // 6 cuts; 1 under ThreadSanitizer
}
