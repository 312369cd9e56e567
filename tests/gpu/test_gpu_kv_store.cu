// The key-value store (durable/kv_store.hpp) on a GPU page cache: batched
// SET / DELETE / GET kernels (a key per lane) from device and host arrays
// checked against a host model, a table many times larger than the cache,
// gets and staged sets from a user's kernel, and power cuts: a disk with a
// volatile write cache (crash_target.hpp) cut at a random request while
// batches run, revived, opened again by a new controller and GPU cache
// (recovery), and the table compared with the model after each prefix of
// the batches (it must be one holding every batch whose call returned).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/kv_store.hpp"
#include "deepwell/targets/crash_target.hpp"

using namespace deepwell;
using namespace deepwell::durable;

namespace {

#define CUDA_OK(x) ASSERT_EQ(cudaError_t(x), cudaSuccess) << #x << ": " << cudaGetErrorString(cudaError_t(x))

template <class T>
struct dbuf {
  T* p = nullptr;
  size_t n = 0;
  explicit dbuf(size_t count) : n(count) {
    if (cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T)) != cudaSuccess) throw std::runtime_error("cudaMalloc");
  }
  ~dbuf() { cudaFree(p); }
  dbuf(const dbuf&) = delete;
  void up(const std::vector<T>& v) {
    if (cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy");
  }
  std::vector<T> down(size_t count) const {
    std::vector<T> v(count);
    if (cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy");
    return v;
  }
};

controller_config pollers(unsigned n) {
  controller_config c;
  c.pollers = n;
  return c;
}

cache_config gpu_cache(uint64_t pages) {
  cache_config c;
  c.page_size = 4096;
  c.capacity_bytes = pages * 4096;
  c.queue_pairs = 16;
  c.queue_entries = 256;
  c.timeout_ns = 60ull * 1000000000ull;
  return c;
}

uint64_t value_word(uint64_t batch, uint64_t key, uint32_t j) {
  return log_format::mix64(batch * 0x9E3779B97F4A7C15ull + key * 131 + j + 1);
}

using model = std::unordered_map<uint64_t, std::vector<uint64_t>>;

struct op_list {
  std::vector<uint8_t> ops;
  std::vector<uint64_t> keys;
  std::vector<uint64_t> values;
};

op_list random_batch(std::mt19937_64& rng, uint64_t batch, uint64_t universe, uint32_t vw, uint64_t n,
                     double erase_share) {
  op_list b;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t key = (i > 0 && rng() % 5 == 0) ? b.keys[rng() % i] : rng() % universe;
    b.ops.push_back(double(rng() % 1000) < erase_share * 1000 ? kv_op_erase : kv_op_set);
    b.keys.push_back(key);
    for (uint32_t j = 0; j < vw; ++j) b.values.push_back(value_word(batch, key, j) + i);
  }
  return b;
}

struct expected {
  std::vector<uint8_t> status;
  uint64_t inserted = 0, updated = 0, erased = 0, not_found = 0, superseded = 0;
};
expected apply_to(model& m, const op_list& b, uint32_t vw) {
  expected e;
  std::unordered_map<uint64_t, uint64_t> last;
  for (uint64_t i = 0; i < b.keys.size(); ++i) last[b.keys[i]] = i;
  e.status.resize(b.keys.size(), kv_ok);
  for (uint64_t i = 0; i < b.keys.size(); ++i) {
    const uint64_t k = b.keys[i];
    if (last[k] != i) {
      ++e.superseded;
      continue;
    }
    const bool present = m.count(k) != 0;
    if (b.ops[i] == kv_op_set)
      ++(present ? e.updated : e.inserted);
    else if (present)
      ++e.erased;
    else {
      ++e.not_found;
      e.status[i] = kv_not_found;
    }
  }
  for (uint64_t i = 0; i < b.keys.size(); ++i) {
    if (b.ops[i] == kv_op_set)
      m[b.keys[i]] = std::vector<uint64_t>(b.values.begin() + i * vw, b.values.begin() + (i + 1) * vw);
    else
      m.erase(b.keys[i]);
  }
  return e;
}

// GETs of every key of [0, universe) from device arrays, against the model.
::testing::AssertionResult gets_match(kv_store& kv, const model& m, uint64_t universe, uint32_t vw) {
  const uint64_t step = kv.info().max_batch;
  dbuf<uint64_t> dk(step), dv(step * vw);
  dbuf<uint8_t> ds(step);
  for (uint64_t at = 0; at < universe; at += step) {
    const uint64_t n = std::min(step, universe - at);
    std::vector<uint64_t> keys(n);
    for (uint64_t k = 0; k < n; ++k) keys[k] = at + k;
    dk.up(keys);
    const kv_batch_result r = kv.get(dk.p, dv.p, n, kv_memory::device, ds.p);
    const std::vector<uint64_t> got = dv.down(n * vw);
    const std::vector<uint8_t> st = ds.down(n);
    uint64_t present = 0;
    for (uint64_t k = 0; k < n; ++k) {
      auto it = m.find(at + k);
      if (it == m.end()) {
        if (st[k] != kv_not_found) return ::testing::AssertionFailure() << "key " << at + k << " should be absent";
      } else {
        ++present;
        if (st[k] != kv_ok) return ::testing::AssertionFailure() << "key " << at + k << " should be present";
        if (std::memcmp(got.data() + k * vw, it->second.data(), vw * 8) != 0)
          return ::testing::AssertionFailure() << "key " << at + k << ": another value";
      }
    }
    if (r.found != present) return ::testing::AssertionFailure() << "found " << r.found << ", expected " << present;
  }
  return ::testing::AssertionSuccess();
}

struct rig {
  std::shared_ptr<volatile_cache_target> disk;
  std::unique_ptr<controller> ctl;
  std::shared_ptr<page_cache> cache;
  std::unique_ptr<kv_store> kv;
  kv_config cfg;
  kv_options opts;
  uint64_t pages;
  rig(const kv_config& c, uint64_t cache_pages, uint64_t max_batch = 1 << 16) : cfg(c), pages(cache_pages) {
    opts.executor = gpu_kv_support();
    opts.max_batch = max_batch;
    disk = make_volatile_cache_target(kv_store::bytes_needed(cfg));
    power_on();
    kv = std::make_unique<kv_store>(kv_store::create(cache, ctl->add_namespace({disk, 512, false}), cfg, opts, true));
  }
  void power_on() {
    ctl = std::make_unique<controller>(pollers(2));
    cache = make_gpu_page_cache(*ctl, gpu_cache(pages));
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

// A user kernel: each thread gets its key (value in registers) and writes
// out what it found; then stages a set of key + 1M with the value plus one,
// and an erase of every third key.
__global__ void user_kernel(kv_ref kv, kv_stage_ref stage, const uint64_t* keys, uint64_t n, uint64_t* sums,
                            uint8_t* found) {
  const uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool have = i < n;
  uint64_t v[4] = {0, 0, 0, 0};  // value_words <= 4 here
  const kv_status st = kv.get(gpu_warp{}, have, have ? keys[i] : 0, v);
  if (!have) return;
  found[i] = st == kv_ok;
  sums[i] = v[0] + v[1] + v[2] + v[3];
  if (st == kv_ok) {
    v[0] += 1;
    stage.set(keys[i] + 1000000, v);
  }
  if (keys[i] % 3 == 0) stage.erase(keys[i]);
}

}  // namespace

// Random batches of SET, DELETE and both from device arrays (and some from
// host arrays), each followed by a GET of every key from device arrays; a
// table of 8 MiB through a cache of 1 MiB... 4 MiB.
TEST(GpuKv, BatchesMatchAHostModel) {
  kv_config c;
  c.value_bytes = 32;
  c.buckets = 2048;  // 4 KiB buckets of 102 slots: 8 MiB, 208896 slots
  c.log_rows = 1 << 15;
  const uint32_t vw = 4;
  rig r(c, 1024);
  std::mt19937_64 rng(5);
  model m;
  const uint64_t universe = 150000;
  dbuf<uint64_t> dk(1 << 16), dv((1 << 16) * vw);
  dbuf<uint8_t> dops(1 << 16), dst(1 << 16);
  for (uint32_t k = 0; k < 12; ++k) {
    const uint64_t n = 1 + rng() % 40000;
    const uint32_t kind = k % 4;  // set, erase, mixed, mixed from host memory
    op_list b = random_batch(rng, k, universe, vw, n, kind == 0 ? 0.0 : kind == 1 ? 1.0 : 0.3);
    const expected e = apply_to(m, b, vw);
    kv_batch_result res;
    std::vector<uint8_t> st(n);
    if (kind == 3) {
      res = r.kv->apply(b.ops.data(), b.keys.data(), b.values.data(), n, kv_memory::host, st.data());
    } else {
      dk.up(b.keys);
      dv.up(b.values);
      dops.up(b.ops);
      if (kind == 0)
        res = r.kv->set(dk.p, dv.p, n, kv_memory::device, dst.p);
      else if (kind == 1)
        res = r.kv->erase(dk.p, n, kv_memory::device, dst.p);
      else
        res = r.kv->apply(dops.p, dk.p, dv.p, n, kv_memory::device, dst.p);
      st = dst.down(n);
    }
    SCOPED_TRACE("batch " + std::to_string(k));
    EXPECT_EQ(res.inserted, e.inserted);
    EXPECT_EQ(res.updated, e.updated);
    EXPECT_EQ(res.erased, e.erased);
    EXPECT_EQ(res.not_found, e.not_found);
    EXPECT_EQ(res.superseded, e.superseded);
    EXPECT_EQ(res.full, 0u);
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(int(st[i]), int(e.status[i])) << "op " << i;
    ASSERT_TRUE(gets_match(*r.kv, m, universe, vw));
  }
  EXPECT_GT(r.cache->stats().evictions, 0u);
  EXPECT_TRUE(r.cache->last_error().ok());
  r.reopen();
  ASSERT_TRUE(gets_match(*r.kv, m, universe, vw));
}

// A table of 256 MiB (a million and a half slots) through a cache of 8 MiB:
// nearly every bucket a miss, written back by eviction, replayed or
// checkpointed, and still every key where it belongs.
TEST(GpuKv, TableManyTimesLargerThanTheCache) {
  kv_config c;
  c.value_bytes = 16;
  c.buckets = 65536;  // 4 KiB buckets of 170 slots
  c.log_rows = 1 << 14;
  const uint32_t vw = 2;
  rig r(c, 2048);
  std::mt19937_64 rng(9);
  model m;
  const uint64_t universe = 1ull << 22;
  for (uint32_t k = 0; k < 6; ++k) {
    op_list b = random_batch(rng, k, universe, vw, 60000, k % 2 ? 0.2 : 0.0);
    apply_to(m, b, vw);
    r.kv->apply(b.ops.data(), b.keys.data(), b.values.data(), b.keys.size());
  }
  EXPECT_GT(r.cache->stats().evictions, 10000u);
  EXPECT_GE(r.kv->checkpoints(), 1u);
  // The keys the model holds, and as many never set.
  std::vector<uint64_t> keys;
  for (auto& [k, v] : m) keys.push_back(k);
  for (uint64_t k = 0; keys.size() < 2 * m.size(); ++k)
    if (!m.count(k)) keys.push_back(k);
  std::vector<uint64_t> got(keys.size() * vw);
  std::vector<uint8_t> st(keys.size());
  for (uint64_t at = 0; at < keys.size(); at += 65536) {
    const uint64_t n = std::min<uint64_t>(65536, keys.size() - at);
    r.kv->get(keys.data() + at, got.data() + at * vw, n, kv_memory::host, st.data() + at);
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = m.find(keys[i]);
    ASSERT_EQ(st[i], it == m.end() ? kv_not_found : kv_ok) << keys[i];
    if (it != m.end()) ASSERT_EQ(std::memcmp(got.data() + i * vw, it->second.data(), vw * 8), 0) << keys[i];
  }
}

// kv_ref::get inside a user's kernel (values in the thread's registers), and
// sets and erases staged from it, committed as one batch.
TEST(GpuKv, UserKernelsGetAndStageOps) {
  kv_config c;
  c.value_bytes = 32;
  c.buckets = 256;
  rig r(c, 1024, 8192);
  const uint64_t n = 3000;
  std::vector<uint64_t> keys(n), values(n * 4);
  for (uint64_t i = 0; i < n; ++i) {
    keys[i] = i * 7;
    for (uint32_t j = 0; j < 4; ++j) values[i * 4 + j] = i * 10 + j;
  }
  r.kv->set(keys.data(), values.data(), n / 2);  // the first half
  dbuf<uint64_t> dk(n), sums(n);
  dbuf<uint8_t> found(n);
  dk.up(keys);
  const kv_stage_ref stage = r.kv->stage();
  user_kernel<<<unsigned((n + 255) / 256), 256>>>(r.kv->ref(), stage, dk.p, n, sums.p, found.p);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const auto s = sums.down(n);
  const auto f = found.down(n);
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(f[i], i < n / 2 ? 1 : 0) << i;
    if (i < n / 2) ASSERT_EQ(s[i], i * 40 + 6) << i;
  }
  const kv_batch_result res = r.kv->commit_staged();
  EXPECT_EQ(res.inserted, n / 2);  // key + 1M for the first half
  EXPECT_EQ(res.erased, (n / 2 + 2) / 3);
  EXPECT_EQ(res.dropped, 0u);
  std::vector<uint64_t> out(n * 4);
  std::vector<uint8_t> st(n);
  std::vector<uint64_t> moved(n);
  for (uint64_t i = 0; i < n; ++i) moved[i] = keys[i] + 1000000;
  r.kv->get(moved.data(), out.data(), n, kv_memory::host, st.data());
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(st[i], i < n / 2 ? kv_ok : kv_not_found) << i;
    if (i < n / 2) ASSERT_EQ(out[i * 4], values[i * 4] + 1) << i;
  }
  r.kv->get(keys.data(), out.data(), n, kv_memory::host, st.data());
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(st[i], i < n / 2 && keys[i] % 3 != 0 ? kv_ok : kv_not_found) << i;
}

// ---------------------------------------------------------------------------

namespace {

struct workload {
  uint32_t vw = 2;
  uint64_t universe = 20000;
  std::vector<op_list> batches;
  std::vector<model> after;
};

model table_of(kv_store& kv, uint32_t vw, std::string& problem) {
  std::vector<uint64_t> keys;
  std::vector<uint8_t> values;
  kv.contents(keys, values);
  model m;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::vector<uint64_t> v(vw);
    std::memcpy(v.data(), values.data() + i * vw * 8, vw * 8);
    if (!m.emplace(keys[i], v).second) problem = "key " + std::to_string(keys[i]) + " twice";
  }
  return m;
}

kv_config crash_config() {
  kv_config c;
  c.value_bytes = 16;
  c.bucket_bytes = 1024;  // 42 slots a bucket
  c.buckets = 1024;       // 43008 slots, 1 MiB
  c.max_probe = 32;
  c.log_rows = 2048;      // a checkpoint every few batches
  return c;
}

// Returns the batches that returned; fails the test if the recovered table
// is not the model of `returned` or `returned + 1` batches.
uint32_t gpu_trial(const workload& w, uint64_t n, power_cut how, uint64_t* requests, bool* fired) {
  rig r(crash_config(), 512, 8192);
  const uint64_t before = r.disk->requests();
  if (n) r.disk->cut_at_request(n, how);
  uint32_t returned = 0;
  for (const op_list& b : w.batches) {
    try {
      r.kv->apply(b.ops.data(), b.keys.data(), b.values.data(), b.keys.size());
    } catch (const error&) {
      break;
    }
    ++returned;
  }
  if (requests) *requests = r.disk->requests() - before;
  if (fired) *fired = r.disk->dead();
  if (!r.disk->dead()) r.disk->cut(how);
  r.power_off();
  r.disk->revive();
  r.disk->cut_at_request(0, how);
  r.reopen();
  std::string problem;
  const model got = table_of(*r.kv, w.vw, problem);
  EXPECT_EQ(problem, "");
  for (uint32_t k = returned; k <= std::min<uint32_t>(returned + 1, uint32_t(w.batches.size())); ++k)
    if (got == w.after[k]) {
      EXPECT_TRUE(gets_match(*r.kv, w.after[k], w.universe, w.vw));
      return returned;
    }
  ADD_FAILURE() << "cut at request " << n << " (mode " << how.mode << "): " << returned
                << " batches returned; the recovered table (" << got.size() << " keys) matches neither prefix";
  return returned;
}

}  // namespace

TEST(GpuKvCrash, PowerCutsRecoverToABatchBoundary) {
  workload w;
  std::mt19937_64 rng(77);
  model m;
  w.after.push_back(m);
  for (uint32_t k = 0; k < 6; ++k) {
    w.batches.push_back(random_batch(rng, k, w.universe, w.vw, 500 + rng() % 3000, 0.25));
    apply_to(m, w.batches.back(), w.vw);
    w.after.push_back(m);
  }
  uint64_t requests = 0;
  gpu_trial(w, 0, {}, &requests, nullptr);
  ASSERT_GT(requests, 20u);
  uint32_t fired = 0, middle = 0;
  const uint32_t trials = 60;
  for (uint32_t t = 0; t < trials; ++t) {
    power_cut how;
    how.mode = power_cut::mode_t(t % 3);
    how.seed = rng();
    const uint64_t n = 1 + rng() % requests;
    SCOPED_TRACE("trial " + std::to_string(t) + ": cut at request " + std::to_string(n));
    bool f = false;
    const uint32_t returned = gpu_trial(w, n, how, nullptr, &f);
    fired += f;
    middle += returned > 0 && returned < w.batches.size();
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GE(fired, trials / 2);
  EXPECT_GE(middle, trials / 3);
}
