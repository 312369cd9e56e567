// The write-ahead log (durable/log.hpp) from GPU kernels: a warp's append
// fills one striped row; many warps run transactions at once, each in its
// own partition over its own region of a data array (moving amounts
// between random elements of it: the region's sum is invariant); then a
// disk with a volatile write cache is cut at random requests in every
// power-cut mode, revived, and a new controller and GPU cache open the log
// and recover: every region must equal the state after a prefix of its
// warp's transactions that holds every commit that returned. Redo and undo.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "deepwell/cache/gpu_launch.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/log.hpp"
#include "deepwell/targets/crash_target.hpp"
#include "deepwell/views/array.hpp"

using namespace deepwell;
using namespace deepwell::durable;
namespace lf = deepwell::durable::log_format;

namespace {

#define CUDA_OK(x) ASSERT_EQ(cudaError_t(x), cudaSuccess) << #x << ": " << cudaGetErrorString(cudaError_t(x))

// [offset, offset + length) of another target: the log and the data as two
// namespaces of one disk, cut at one instant.
class window_target final : public target {
 public:
  window_target(std::shared_ptr<target> inner, uint64_t offset, uint64_t length)
      : inner_(std::move(inner)), offset_(offset), length_(length) {}
  uint64_t size() const override { return length_; }
  bool writable() const override { return inner_->writable(); }
  uint32_t io_alignment() const override { return inner_->io_alignment(); }
  uint32_t memory_alignment() const override { return inner_->memory_alignment(); }
  std::string describe() const override {
    return "bytes " + std::to_string(offset_) + "+" + std::to_string(length_) + " of " + inner_->describe();
  }
  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    inner_->read(io, buf, len, offset_ + offset, done);
  }
  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override {
    inner_->write(io, buf, len, offset_ + offset, fua, done);
  }
  void flush(io_engine& io, io_callback done) override { inner_->flush(io, done); }

 private:
  std::shared_ptr<target> inner_;
  uint64_t offset_, length_;
};

constexpr uint64_t initial_value = 1000;
constexpr uint32_t block_threads = 128;  // 4 warps a block

struct rig {
  uint32_t partitions, rows;
  uint64_t log_bytes, data_words, cache_pages;
  std::shared_ptr<volatile_cache_target> disk;
  std::unique_ptr<controller> ctl;
  uint32_t log_ns = 0, data_ns = 0;
  std::shared_ptr<page_cache> cache;
  std::unique_ptr<array<uint64_t>> data;

  rig(uint32_t parts, uint32_t rows_, uint64_t words, uint64_t pages)
      : partitions(parts), rows(rows_), log_bytes(write_ahead_log::bytes_needed(parts, rows_)), data_words(words),
        cache_pages(pages) {
    std::vector<uint8_t> img(log_bytes + words * 8, 0);
    for (uint64_t i = 0; i < words; ++i) std::memcpy(img.data() + log_bytes + i * 8, &initial_value, 8);
    disk = make_volatile_cache_target(std::move(img));
    power_on();
  }
  void power_on() {
    controller_config cc;
    cc.pollers = 2;
    ctl = std::make_unique<controller>(cc);
    log_ns = ctl->add_namespace({std::make_shared<window_target>(disk, 0, log_bytes), 512, false});
    data_ns = ctl->add_namespace({std::make_shared<window_target>(disk, log_bytes, data_words * 8), 512, false});
    cache_config c;
    c.page_size = 4096;
    c.capacity_bytes = cache_pages * 4096;
    c.queue_pairs = 16;
    c.queue_entries = 128;
    c.timeout_ns = 20ull * 1000000000ull;
    cache = make_gpu_page_cache(*ctl, c);
    data = std::make_unique<array<uint64_t>>(cache, data_ns);
  }
  void power_off() {
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    data.reset();
    cache.reset();
    ctl.reset();
  }
  void crash_and_reboot(const power_cut& how = {}) {
    if (!disk->dead()) disk->cut(how);
    power_off();
    disk->revive();
    power_on();
  }
  write_ahead_log create(log_form form) {
    log_config c;
    c.form = form;
    c.partitions = partitions;
    c.rows = rows;
    c.tag = "gpu-bank";
    return write_ahead_log::create(cache, log_ns, {*data}, c);
  }
  write_ahead_log open() { return write_ahead_log::open(cache, log_ns, {*data}, "gpu-bank"); }
  std::vector<uint64_t> durable_data() const {
    const auto img = disk->durable_image();
    std::vector<uint64_t> v(data_words);
    std::memcpy(v.data(), img.data() + log_bytes, data_words * 8);
    return v;
  }
};

struct tallies {
  unsigned long long failed;
  unsigned int last;
};

__device__ void note(tallies* t, request_status s) {
  if (!s.ok()) {
    atomicAdd(&t->failed, 1ull);
    t->last = s.pack();
  }
}

// The lowest failing lane's status, in every lane.
__device__ request_status uniform_status(const gpu_full_warp& w, request_status s) {
  const unsigned bad = w.ballot(0xFFFFFFFFu, !s.ok());
  return bad ? request_status::unpack(w.shfl(0xFFFFFFFFu, s.pack(), lowest_lane(bad))) : request_status{};
}

// ---- the bank: warp w owns elements [w * region, (w + 1) * region) ----

// Transaction j of warp w: lanes [0, k) each take one element, distinct.
DW_HD inline unsigned tx_lanes(uint32_t w, uint32_t j) { return 2 + (j * 13 + w) % 31; }
DW_HD inline uint64_t tx_element(uint32_t w, uint32_t j, unsigned lane, uint64_t region) {
  return uint64_t(w) * region + (uint64_t(j) * 7 + lane) % region;
}
DW_HD inline bool tx_aborts(uint32_t w, uint32_t j) { return (j + w) % 5 == 3; }
DW_HD inline uint64_t tx_amount(uint64_t old, uint32_t j) {
  const uint64_t a = old / 3 + j % 5;
  return a < old ? a : old;
}
DW_HD inline uint64_t tx_id(uint32_t w, uint32_t j) { return uint64_t(w) << 20 | (j + 1); }

// Every warp runs `txs` transactions in its own partition; lane l of
// transaction j moves an amount of its element to lane l + 1's (cyclically
// over the transaction's k lanes). returned[w]: transactions whose commit
// (or abort) returned ok, in order.
__global__ void bank_kernel(log_ref log, uint32_t txs, uint64_t region, uint32_t* returned, tallies* t) {
  const gpu_full_warp w;
  const uint32_t wid = warp_partition();
  const unsigned lane = w.lane();
  const bool redo = log.form() == log_form::redo;
  for (uint32_t j = 0; j < txs; ++j) {
    const unsigned k = tx_lanes(wid, j);
    const bool have = lane < k;
    const uint64_t elem = tx_element(wid, j, lane, region);
    log_tx tx = log.begin(w, wid, tx_id(wid, j));
    request_status s = tx.status;
    const uint64_t old = log.read(w, have, 0, elem, &s);
    const uint64_t give = have ? tx_amount(old, j) : 0;
    const uint64_t take = shfl64(w, 0xFFFFFFFFu, give, have ? (lane + k - 1) % k : lane);
    const uint64_t nv = old - give + take;
    const bool abort = tx_aborts(wid, j);
    if (w.ballot(0xFFFFFFFFu, have && !s.ok())) break;
    if (redo) {
      s = log.append(w, tx, have, {0, elem, nv});
    } else {
      s = log.append_old(w, tx, have, 0, elem);
      if (s.ok()) s = log.persist(w, tx);
      if (s.ok()) s = log.write(w, have, 0, elem, abort ? nv ^ 0x5A5A : nv);
      s = uniform_status(w, s);
    }
    if (s.ok()) s = abort ? log.abort(w, tx) : log.commit(w, tx);
    s = uniform_status(w, s);
    if (!s.ok()) {
      if (lane == 0) note(t, s);
      break;
    }
    if (lane == 0) returned[wid] = j + 1;
  }
}

// The host's replay of warp w's transactions: the region's state after each.
std::vector<std::vector<uint64_t>> region_states(uint32_t w, uint32_t txs, uint64_t region) {
  std::vector<std::vector<uint64_t>> out;
  std::vector<uint64_t> st(region, initial_value);
  out.push_back(st);
  for (uint32_t j = 0; j < txs; ++j) {
    const unsigned k = tx_lanes(w, j);
    if (!tx_aborts(w, j)) {
      std::vector<uint64_t> old(k), give(k);
      for (unsigned l = 0; l < k; ++l) {
        old[l] = st[tx_element(w, j, l, region) - uint64_t(w) * region];
        give[l] = tx_amount(old[l], j);
      }
      for (unsigned l = 0; l < k; ++l) st[tx_element(w, j, l, region) - uint64_t(w) * region] = old[l] - give[l] + give[(l + k - 1) % k];
    }
    out.push_back(st);
  }
  return out;
}

struct bank_params {
  log_form form;
  uint32_t warps = 64;
  uint32_t txs = 6;
  uint64_t region = 64;
  uint32_t rows = 16;
  uint64_t cache_pages = 4096;
};

struct bank_result {
  uint64_t requests = 0;
  uint64_t returned_total = 0;
  uint64_t replayed = 0, rolled_back = 0;
  std::string failure;
};

// One run on a fresh disk, with a cut armed at request `cut_at` (0: none;
// then the disk is cut after the kernel).
bank_result bank_run(const bank_params& p, uint64_t cut_at, const power_cut& how) {
  bank_result out;
  // Every resident warp may pin 32 pages (check_launch): room for twice that.
  rig r(p.warps, p.rows, uint64_t(p.warps) * p.region, std::max<uint64_t>(p.cache_pages, uint64_t(p.warps) * 64));
  uint32_t* returned = nullptr;
  tallies* t = nullptr;
  check_cuda(cudaMalloc(&returned, p.warps * 4), "cudaMalloc");
  check_cuda(cudaMemset(returned, 0, p.warps * 4), "cudaMemset");
  check_cuda(cudaMalloc(&t, sizeof(tallies)), "cudaMalloc");
  check_cuda(cudaMemset(t, 0, sizeof(tallies)), "cudaMemset");
  {
    write_ahead_log log = r.create(p.form);
    const uint32_t blocks = p.warps * 32 / block_threads;
    log.check_launch(uint64_t(blocks) * (block_threads / 32));
    check_launch(*r.cache, bank_kernel, blocks, block_threads);
    const uint64_t base = r.disk->requests();
    if (cut_at) r.disk->cut_at_request(cut_at, how);
    bank_kernel<<<blocks, block_threads>>>(log.ref(), p.txs, p.region, returned, t);
    check_cuda(cudaGetLastError(), "launch");
    check_cuda(cudaDeviceSynchronize(), "bank kernel");
    out.requests = r.disk->requests() - base;
  }
  std::vector<uint32_t> ret(p.warps);
  check_cuda(cudaMemcpy(ret.data(), returned, p.warps * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(returned);
  cudaFree(t);
  r.crash_and_reboot(how);
  try {
    write_ahead_log log = r.open();
    const recovery_result rec = log.recover();
    out.replayed = rec.replayed;
    out.rolled_back = rec.rolled_back;
  } catch (const error& e) {
    out.failure = std::string("recovery failed: ") + e.what();
    return out;
  }
  const std::vector<uint64_t> now = r.durable_data();
  for (uint32_t w = 0; w < p.warps; ++w) {
    out.returned_total += ret[w];
    const auto states = region_states(w, p.txs, p.region);
    const std::vector<uint64_t> mine(now.begin() + w * p.region, now.begin() + (w + 1) * p.region);
    uint64_t sum = 0;
    for (uint64_t v : mine) sum += v;
    if (sum != initial_value * p.region) {
      out.failure = "warp " + std::to_string(w) + ": the region's sum is " + std::to_string(sum);
      return out;
    }
    bool found = false;
    for (size_t k = ret[w]; k < states.size() && !found; ++k) found = states[k] == mine;
    if (!found) {
      int any = -1;
      for (size_t k = 0; k < states.size(); ++k)
        if (states[k] == mine) any = int(k);
      out.failure = "warp " + std::to_string(w) + ": " + std::to_string(ret[w]) + " transactions returned, the region " +
                    (any >= 0 ? "is the state after " + std::to_string(any) + " (a lost commit)"
                              : std::string("equals no prefix (a partial transaction)"));
      return out;
    }
  }
  return out;
}

void bank_crash_suite(const bank_params& p, unsigned cuts, uint64_t seed) {
  const bank_result base = bank_run(p, 0, {});
  ASSERT_EQ(base.failure, "");
  ASSERT_EQ(base.returned_total, uint64_t(p.warps) * p.txs);
  ASSERT_GT(base.requests, 10u);
  std::mt19937_64 rng(seed);
  unsigned inside = 0;
  uint64_t replayed = 0, rolled_back = 0;
  for (unsigned i = 0; i < cuts; ++i) {
    power_cut how;
    how.mode = power_cut::mode_t(i % 3);
    how.seed = rng();
    how.keep_fraction = double(rng() % 1000) / 1000.0;
    const uint64_t at = 1 + rng() % base.requests;
    const bank_result r = bank_run(p, at, how);
    inside += r.returned_total < uint64_t(p.warps) * p.txs;
    replayed += r.replayed;
    rolled_back += r.rolled_back;
    ASSERT_EQ(r.failure, "") << "cut " << i << " at request " << at << " of " << base.requests << ", mode "
                             << how.mode << ", seed " << how.seed << ", keep " << how.keep_fraction;
  }
  EXPECT_GT(inside, cuts / 3);
  std::printf("%u cuts over %llu requests: %u inside the kernel; %llu transactions replayed, %llu rolled back\n", cuts,
              (unsigned long long)base.requests, inside, (unsigned long long)replayed, (unsigned long long)rolled_back);
}

// One warp appends an entry per lane and persists it.
__global__ void append_row(log_ref log, tallies* t) {
  const gpu_full_warp w;
  log_tx tx = log.begin(w, 3, 77);
  note(t, log.append(w, tx, true, {0, 100u + w.lane(), 5000u + w.lane()}));
  note(t, log.persist(w, tx));
}

}  // namespace

// The HCL row: lane l's word j at row + 32 j + l, each record valid.
TEST(GpuLog, AWarpsAppendFillsOneStripedRow) {
  rig r(8, 4, 4096, 1024);
  write_ahead_log log = r.create(log_form::redo);
  const log_ref ref = log.ref();
  tallies* t;
  CUDA_OK(cudaMalloc(&t, sizeof(tallies)));
  CUDA_OK(cudaMemset(t, 0, sizeof(tallies)));
  append_row<<<1, 32>>>(ref, t);
  CUDA_OK(cudaDeviceSynchronize());
  tallies h{};
  CUDA_OK(cudaMemcpy(&h, t, sizeof(h), cudaMemcpyDeviceToHost));
  cudaFree(t);
  EXPECT_EQ(h.failed, 0u) << describe(request_status::unpack(h.last));
  const auto img = r.disk->durable_image();
  for (uint32_t lane = 0; lane < 32; ++lane) {
    lf::record rec;
    for (uint32_t j = 0; j < lf::entry_words; ++j)
      std::memcpy(&rec.w[j], img.data() + lf::record_word(8, 4, 3, 0, j, lane) * 4, 4);
    EXPECT_TRUE(rec.valid(ref.seed(3, 0, lane))) << lane;
    EXPECT_EQ(rec.txid(), 77u);
    EXPECT_EQ(rec.index(), 100u + lane);
    EXPECT_EQ(rec.value(), 5000u + lane);
  }
}

// Without a cut in the middle: every transaction survives a cut after the
// kernel, and a checkpoint lets a second kernel reuse the rows.
TEST(GpuLog, ManyWarpsCommitThenCheckpointAndRunAgain) {
  for (log_form form : {log_form::redo, log_form::undo}) {
    bank_params p;
    p.form = form;
    p.warps = 256;
    p.txs = 6;
    const bank_result r = bank_run(p, 0, {});
    EXPECT_EQ(r.failure, "");
    EXPECT_EQ(r.returned_total, uint64_t(p.warps) * p.txs);
  }
  // Two launches with a checkpoint between them (redo: the first launch's
  // data is made durable by the checkpoint).
  rig r(64, 16, 64 * 64, 4096);
  write_ahead_log log = r.create(log_form::redo);
  uint32_t* returned;
  tallies* t;
  CUDA_OK(cudaMalloc(&returned, 64 * 4));
  CUDA_OK(cudaMalloc(&t, sizeof(tallies)));
  CUDA_OK(cudaMemset(t, 0, sizeof(tallies)));
  bank_kernel<<<16, block_threads>>>(log.ref(), 6, 64, returned, t);
  CUDA_OK(cudaDeviceSynchronize());
  log.checkpoint();
  const auto after_first = r.durable_data();
  bank_kernel<<<16, block_threads>>>(log.ref(), 6, 64, returned, t);  // the same transactions again, over the new state
  CUDA_OK(cudaDeviceSynchronize());
  tallies h{};
  CUDA_OK(cudaMemcpy(&h, t, sizeof(h), cudaMemcpyDeviceToHost));
  cudaFree(returned);
  cudaFree(t);
  EXPECT_EQ(h.failed, 0u) << describe(request_status::unpack(h.last));
  for (uint32_t w = 0; w < 64; ++w) {
    const auto states = region_states(w, 6, 64);
    const std::vector<uint64_t> mine(after_first.begin() + w * 64, after_first.begin() + (w + 1) * 64);
    EXPECT_EQ(mine, states.back()) << w;
  }
  r.crash_and_reboot();
  write_ahead_log again = r.open();
  const recovery_result rec = again.recover();
  EXPECT_EQ(rec.committed, rec.replayed);
  EXPECT_GT(rec.replayed, 0u);
  uint64_t sum = 0;
  for (uint64_t v : r.durable_data()) sum += v;
  EXPECT_EQ(sum, initial_value * 64 * 64);
}

TEST(GpuLog, RedoCrashAtRandomRequests) {
  bank_params p;
  p.form = log_form::redo;
  bank_crash_suite(p, 60, 17001);
}

TEST(GpuLog, UndoCrashAtRandomRequests) {
  bank_params p;
  p.form = log_form::undo;
  bank_crash_suite(p, 60, 17002);
}
