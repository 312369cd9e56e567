// Server mode's arbitration of storage between clients (tenancy.hpp):
// grants on the command path, shares of the I/O budget by weight, rate
// caps, and a light client's misses under a flooding neighbour. The
// storage is a fault target that holds every read back by a fixed delay,
// so each client's throughput is its bytes in flight over that delay.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "deepwell/controller/controller.hpp"
#include "controller/share_arbiter.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/link/host_client.hpp"
#include "deepwell/protocol/shared_atomic.hpp"
#include "deepwell/targets/target.hpp"
#include "test_util.hpp"

using namespace deepwell;

namespace {

std::shared_ptr<access_grants> grants(std::initializer_list<std::pair<uint32_t, uint8_t>> rights) {
  auto g = std::make_shared<access_grants>();
  for (auto [ns, r] : rights) g->set(ns, r);
  return g;
}

// `threads` threads reading one 4 KiB block each, in a loop, until `stop`;
// returns how many reads completed (all must succeed).
struct flooder {
  std::vector<std::thread> threads;
  std::atomic<uint64_t> done{0}, failed{0};
  void start(const host_queue_client& c, uint32_t ns, unsigned n, const std::atomic<bool>& stop) {
    for (unsigned t = 0; t < n; ++t)
      threads.emplace_back([&c, &stop, this, ns, t] {
        std::vector<uint8_t> buf(4096);
        uint64_t lba = t * 7;
        while (!stop.load(std::memory_order_relaxed)) {
          if (c.read(ns, lba++ % 256, 1, 4096, buf.data()).ok())
            done.fetch_add(1, std::memory_order_relaxed);
          else
            failed.fetch_add(1, std::memory_order_relaxed);
        }
      });
  }
  void join() {
    for (auto& t : threads) t.join();
  }
};

// Storage that serves one request at a time, each taking `service_ns`, in
// the order they arrive (a disk with one head): a request waits behind
// everything ahead of it, so its latency grows with the queue in front.
class fifo_device final : public target {
 public:
  fifo_device(std::shared_ptr<target> inner, uint64_t service_ns) : inner_(std::move(inner)), service_ns_(service_ns) {}
  uint64_t size() const override { return inner_->size(); }
  bool writable() const override { return inner_->writable(); }
  uint32_t io_alignment() const override { return 1; }
  uint32_t memory_alignment() const override { return 1; }
  std::string describe() const override { return "a one-at-a-time device"; }
  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    uint64_t wait;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const uint64_t now = now_ns();
      free_at_ = std::max(free_at_, now) + service_ns_;
      wait = free_at_ - now;
    }
    io_op op;
    op.kind = io_op::timer;
    op.delay_ns = wait;
    op.done = {&served, new pending{this, &io, buf, len, offset, done}};
    io.queue(op);
  }
  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override {
    inner_->write(io, buf, len, offset, fua, done);
  }
  void flush(io_engine& io, io_callback done) override { inner_->flush(io, done); }

 private:
  struct pending {
    fifo_device* self;
    io_engine* io;
    void* buf;
    uint32_t len;
    uint64_t offset;
    io_callback done;
  };
  static void served(void* ctx, int64_t result) {
    std::unique_ptr<pending> p(static_cast<pending*>(ctx));
    if (result < 0) return p->done(result);
    p->self->inner_->read(*p->io, p->buf, p->len, p->offset, p->done);
  }
  std::shared_ptr<target> inner_;
  const uint64_t service_ns_;
  std::mutex mutex_;
  uint64_t free_at_ = 0;
};

// A light client's read latency alone (median) and beside a flooding
// client (median and 90th percentile), and the flood's reads a second, on
// a one-at-a-time device.
struct light_and_flood {
  double alone_us = 0, loaded_p50_us = 0, loaded_p90_us = 0, flood_per_s = 0;
  uint64_t budget_now = 0, floor_ns = 0;  // the arbiter's, while both ran
};

light_and_flood measure_light_beside_flood(double latency_target) {
  controller_config cc;
  cc.pollers = 1;
  cc.io_budget_bytes = 64 * 4096;  // 64 commands in flight: a backlog of 64 services without the target
  cc.latency_target = latency_target;
  controller ctl(cc);
  const uint32_t ns =
      ctl.add_namespace({std::make_shared<fifo_device>(test::pattern_memory(1 << 20, false, 8), 1'000'000), 4096, true});
  host_queue_client light(client_handle(ctl.create_queue_pair({16, 16, 4096}, {nullptr, 1})));
  host_queue_client heavy(client_handle(ctl.create_queue_pair({256, 256, 4096}, {nullptr, 2})));
  auto sparse_reads = [&](int n) {
    std::vector<uint8_t> buf(4096);
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(light.read(ns, uint64_t(i * 13) % 256, 1, 4096, buf.data()).ok());
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  };
  light_and_flood r;
  sparse_reads(40);
  r.alone_us = ctl.client_stats(1).latency_percentile_us(0.5);
  std::atomic<bool> stop{false};
  flooder f;
  f.start(heavy, ns, 96, stop);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  sparse_reads(20);  // both running for a while: the steady state is measured, not the first arrival
  const client_counters before = ctl.client_stats(1);
  const uint64_t flood_before = f.done.load();
  const auto t0 = std::chrono::steady_clock::now();
  sparse_reads(60);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.flood_per_s = double(f.done.load() - flood_before) / secs;
  r.budget_now = ctl.io_budget_now();
  r.floor_ns = ctl.latency_floor_ns();
  client_counters after = ctl.client_stats(1);
  stop = true;
  f.join();
  EXPECT_EQ(f.failed.load(), 0u);
  for (int i = 0; i < client_counters::latency_buckets; ++i) after.latency_us[i] -= before.latency_us[i];
  r.loaded_p50_us = after.latency_percentile_us(0.5);
  r.loaded_p90_us = after.latency_percentile_us(0.9);
  return r;
}

}  // namespace

TEST(Grants, ACommandNamingANamespaceWithoutAGrantFindsNoNamespace) {
  controller_config cc;
  cc.pollers = 1;
  cc.io_budget_bytes = 1 << 20;
  controller ctl(cc);
  const uint32_t mine = ctl.add_namespace({test::pattern_memory(1 << 20, true, 1), 4096, false});
  const uint32_t theirs = ctl.add_namespace({test::pattern_memory(1 << 20, true, 2), 4096, false});
  const uint32_t read_only = ctl.add_namespace({test::pattern_memory(1 << 20, true, 3), 4096, false});
  host_queue_client c(client_handle(ctl.create_queue_pair(
      {16, 16, 4096}, {grants({{mine, access_grants::read | access_grants::write}, {read_only, access_grants::read}}), 7})));
  std::vector<uint8_t> buf(4096, 0x5A), back(4096);
  EXPECT_TRUE(c.write(mine, 1, 1, 4096, buf.data()).ok());
  EXPECT_TRUE(c.read(mine, 1, 1, 4096, back.data()).ok());
  EXPECT_EQ(back, buf);
  // Another client's namespace does not exist for this one, whatever the command.
  for (auto s : {c.read(theirs, 0, 1, 4096, back.data()), c.write(theirs, 0, 1, 4096, buf.data()), c.flush(theirs)}) {
    EXPECT_EQ(s.code, client_code::nvme_error);
    EXPECT_EQ(s.nvme, nvme::sc::invalid_namespace);
  }
  nvme::identify_namespace id{};
  EXPECT_EQ(c.identify(theirs, id).nvme, nvme::sc::invalid_namespace);
  // Nor does it learn its size: out-of-range reads of it say the same.
  EXPECT_EQ(c.read(theirs, 1u << 30, 1, 4096, back.data()).nvme, nvme::sc::invalid_namespace);
  // A read grant reads and does not write.
  EXPECT_TRUE(c.read(read_only, 0, 1, 4096, back.data()).ok());
  EXPECT_EQ(c.write(read_only, 0, 1, 4096, buf.data()).nvme, nvme::sc::write_to_read_only);
  // Nothing of the other namespace changed, nothing leaked into our buffer.
  host_queue_client all(ctl.create_queue_pair({16, 16, 4096}));  // the embedded client: every namespace
  ASSERT_TRUE(all.read(theirs, 0, 1, 4096, back.data()).ok());
  EXPECT_EQ(test::check_pattern(back.data(), 4096, 0, 2), -1);
  const client_counters k = ctl.client_stats(7);
  EXPECT_GE(k.errors, 6u);
  EXPECT_GE(k.reads, 3u);
}

TEST(FairShare, TwoFloodingClientsGetTheStorageInProportionToTheirWeights) {
  controller_config cc;
  cc.pollers = 2;  // the shares hold across pollers: the budget is the controller's
  cc.io_budget_bytes = 8 * 4096;
  controller ctl(cc);
  auto slow = make_fault_target(test::pattern_memory(1 << 20, false, 4));
  slow->add_rule({fault_rule::delay, 0, UINT64_MAX, 0, 4'000'000, 0});  // every read: 4 ms
  const uint32_t ns = ctl.add_namespace({slow, 4096, true});
  ctl.set_client_share(1, {1.0, 0});
  ctl.set_client_share(2, {3.0, 0});
  // Each client floods through two queue pairs (one per poller).
  std::vector<std::unique_ptr<host_queue_client>> qs;
  for (uint32_t client : {1u, 2u})
    for (int i = 0; i < 2; ++i)
      qs.push_back(std::make_unique<host_queue_client>(
          client_handle(ctl.create_queue_pair({64, 64, 4096}, {nullptr, client}))));
  std::atomic<bool> stop{false};
  flooder f[4];
  for (int i = 0; i < 4; ++i) f[i].start(*qs[i], ns, 6, stop);
  // Judged over a fixed amount of work, not a fixed time: a slow machine
  // (ThreadSanitizer, a busy CI runner) takes longer, and the proportion
  // must hold all the same.
  auto total = [&] { return f[0].done + f[1].done + f[2].done + f[3].done; };
  auto wait_for_reads = [&](uint64_t n) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (total() < n && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  wait_for_reads(150);  // settle
  const uint64_t a0 = f[0].done + f[1].done, b0 = f[2].done + f[3].done;
  wait_for_reads(a0 + b0 + 800);
  const uint64_t a = f[0].done + f[1].done - a0, b = f[2].done + f[3].done - b0;
  stop = true;
  for (auto& x : f) x.join();
  for (auto& x : f) EXPECT_EQ(x.failed.load(), 0u);
  ASSERT_GT(a + b, 200u) << "too few reads to judge";
  const double share_a = double(a) / double(a + b);
  EXPECT_NEAR(share_a, 0.25, 0.1) << a << " reads against " << b;
  EXPECT_GT(ctl.client_stats(1).throttled, 0u) << "the light-weight client waited for its share";
  EXPECT_EQ(ctl.client_stats(1).in_flight_bytes + ctl.client_stats(2).in_flight_bytes, 0u) << "all settled";
}

TEST(FairShare, ARateCapHoldsAClientToItsBytesPerSecond) {
  controller_config cc;
  cc.pollers = 1;
  cc.io_budget_bytes = 1 << 20;
  controller ctl(cc);
  const uint32_t ns = ctl.add_namespace({test::pattern_memory(1 << 20, false, 5), 4096, true});
  const uint64_t rate = 2 << 20;  // 2 MiB/s: 512 reads of 4 KiB a second
  ctl.set_client_share(3, {1.0, rate});
  // Seconds for `n` reads by a flood through a client's queue pair.
  auto seconds_for = [&](uint32_t client, uint64_t n) {
    host_queue_client c(client_handle(ctl.create_queue_pair({64, 64, 4096}, {nullptr, client})));
    std::atomic<bool> stop{false};
    flooder f;
    f.start(c, ns, 4, stop);
    const auto t0 = std::chrono::steady_clock::now();
    const auto give_up = t0 + std::chrono::seconds(60);
    while (f.done.load() < n && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stop = true;
    f.join();
    EXPECT_EQ(f.failed.load(), 0u);
    EXPECT_GE(f.done.load(), n) << "the flood did not finish its reads";
    return s;
  };
  // Judged over a fixed amount of work: what the machine does without a
  // cap (client 4) bounds what the cap may be blamed for.
  const uint64_t n = 768;  // 1.5 s at the rate
  const double uncapped = seconds_for(4, n);
  const double capped = seconds_for(3, n);
  const double at_rate = double(n * 4096) / double(rate);
  // The first burst (50 ms of the rate, at least 64 KiB) comes on top.
  const double burst = std::max(0.05 * double(rate), 65536.0) / double(rate);
  EXPECT_GT(capped, 0.9 * (at_rate - burst)) << n << " reads in " << capped << " s: faster than the cap";
  EXPECT_LT(capped, 1.6 * std::max(at_rate, uncapped))
      << n << " reads in " << capped << " s, against " << at_rate << " s at the rate and " << uncapped
      << " s without a cap: the cap held the client below its rate";
}

TEST(FairShare, ALightClientsMissesAreNotStarvedByAFloodingNeighbour) {
  controller_config cc;
  cc.pollers = 1;
  cc.io_budget_bytes = 16 * 4096;
  controller ctl(cc);
  auto slow = make_fault_target(test::pattern_memory(1 << 20, false, 6));
  slow->add_rule({fault_rule::delay, 0, UINT64_MAX, 0, 2'000'000, 0});  // 2 ms
  const uint32_t ns = ctl.add_namespace({slow, 4096, true});
  host_queue_client light(client_handle(ctl.create_queue_pair({16, 16, 4096}, {nullptr, 1})));
  host_queue_client heavy(client_handle(ctl.create_queue_pair({256, 256, 4096}, {nullptr, 2})));
  auto sparse_reads = [&](int n) {
    std::vector<uint8_t> buf(4096);
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(light.read(ns, uint64_t(i * 13) % 256, 1, 4096, buf.data()).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  sparse_reads(100);
  const double alone = ctl.client_stats(1).latency_percentile_us(0.99);
  std::atomic<bool> stop{false};
  flooder f;
  f.start(heavy, ns, 12, stop);  // more than its share (8 of 16 commands) while the light one is active
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const client_counters before = ctl.client_stats(1);
  sparse_reads(100);
  client_counters after = ctl.client_stats(1);
  stop = true;
  f.join();
  for (int i = 0; i < client_counters::latency_buckets; ++i) after.latency_us[i] -= before.latency_us[i];
  const double loaded = after.latency_percentile_us(0.99);
  EXPECT_GT(ctl.client_stats(2).throttled, 0u) << "the flood was held to its share";
  EXPECT_GT(f.done.load(), 100u);
  // Power-of-two buckets: "at most twice" is at most one bucket up
  // (ThreadSanitizer's slower poller: two).
#if DEEPWELL_TSAN_BUILD
  const double bound = 4;
#else
  const double bound = 2;
#endif
  EXPECT_LE(loaded, bound * alone) << "p99 alone " << alone << " us, under load " << loaded << " us";
}

TEST(FairShare, TheLatencyTargetKeepsALightClientsMissesNearTheDevicesOwnLatency) {
  // A device that serves 1000 reads a second, one at a time (slow enough
  // that a loaded CI machine's scheduling is small beside it). Without the
  // target the flood keeps its share of the budget (63 commands) queued at
  // the device and the light client's reads wait behind them (about 64x
  // the device's own latency); with it the shared budget shrinks until
  // reads take about twice the device's own latency, and the flood keeps
  // most of the device. (Medians and 90th percentiles of power-of-two
  // buckets: robust on a loaded CI machine; the GPU benchmark measures p99.)
  const light_and_flood fixed = measure_light_beside_flood(0);
  const light_and_flood held = measure_light_beside_flood(2);
  auto say = [](const light_and_flood& r) {
    return std::to_string(r.alone_us) + " us alone, " + std::to_string(r.loaded_p50_us) + " / " +
           std::to_string(r.loaded_p90_us) + " us (p50 / p90) beside the flood, flood " + std::to_string(r.flood_per_s) +
           " reads/s";
  };
  RecordProperty("fixed", say(fixed));
  RecordProperty("held", say(held));
  EXPECT_GE(fixed.loaded_p50_us, 16 * fixed.alone_us) << "without the target: " << say(fixed);
  // ThreadSanitizer's poller takes longer a command: with the flood held
  // to a command or two, its turnaround is what the flood loses.
#if DEEPWELL_TSAN_BUILD
  const double bound = 16, kept = 0.2;
#else
  const double bound = 8, kept = 0.5;
#endif
  EXPECT_LE(held.loaded_p90_us, bound * held.alone_us) << "with the target: " << say(held);
  EXPECT_GE(held.flood_per_s, kept * fixed.flood_per_s) << say(held) << "; without: " << say(fixed);
  EXPECT_EQ(fixed.budget_now, 64u * 4096) << "no target: the budget is fixed";
  EXPECT_EQ(fixed.floor_ns, 0u);
  EXPECT_LT(held.budget_now, 16u * 4096) << "the target held the budget back";
  // The floor is the device's own latency with a command per client (1-2
  // ms, and a loaded machine's timer slack: 4 ms seen in CI), not its
  // latency behind the fixed budget's backlog (64 ms).
  EXPECT_GE(held.floor_ns, 990'000u);
  EXPECT_LE(held.floor_ns, 8'000'000u);
}

// One server, two storages: a dataset that answers in 100 us (the page
// cache, say) and one that takes 10 ms (a slow disk; 10x the fast one's
// floor plus a loaded machine's timer slack, which made the fast floor
// 1.07 ms under ThreadSanitizer in CI). Each gets a floor of its own: were the fast one's floor the disk's too, the disk's ordinary
// latency would look like a 10x backlog and the target would throttle its
// clients to a command each (seen on the H100 machine with one floor:
// 0.24 of the flood's throughput, and weights 1:3 served nearly 1:1).
TEST(FairShare, TheLatencyTargetKeepsAFloorPerNamespace) {
  controller_config cc;
  cc.pollers = 1;
  cc.io_budget_bytes = 64 * 4096;
  cc.latency_target = 2;
  controller ctl(cc);
  const uint32_t fast =
      ctl.add_namespace({std::make_shared<fifo_device>(test::pattern_memory(1 << 20, false, 8), 100'000), 4096, true});
  const uint32_t slow =
      ctl.add_namespace({std::make_shared<fifo_device>(test::pattern_memory(1 << 20, false, 9), 10'000'000), 4096, true});
  host_queue_client a(client_handle(ctl.create_queue_pair({64, 64, 4096}, {nullptr, 1})));
  host_queue_client b(client_handle(ctl.create_queue_pair({64, 64, 4096}, {nullptr, 2})));
  std::atomic<bool> stop{false};
  flooder fa, fb, sa, sb;  // both clients read both namespaces: contention, and samples of each in the probes
  fa.start(a, fast, 4, stop);
  fb.start(b, fast, 4, stop);
  sa.start(a, slow, 4, stop);
  sb.start(b, slow, 4, stop);
  uint64_t f_fast = 0, f_slow = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    f_fast = ctl.latency_floor_ns(fast);
    f_slow = ctl.latency_floor_ns(slow);
    if (f_fast && f_slow && std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(400)) break;
  }
  stop = true;
  for (flooder* f : {&fa, &fb, &sa, &sb}) f->join();
  for (flooder* f : {&fa, &fb, &sa, &sb}) EXPECT_EQ(f->failed.load(), 0u);
  ASSERT_NE(f_fast, 0u) << "the fast namespace was never probed";
  ASSERT_NE(f_slow, 0u) << "the slow namespace was never probed";
  EXPECT_GE(f_fast, 99'000u);
  EXPECT_LT(f_fast, 5'000'000u) << "the fast namespace's floor is its own";
  EXPECT_GE(f_slow, 9'900'000u) << "the slow namespace's floor is not the fast one's";
  EXPECT_EQ(ctl.latency_floor_ns(), f_fast) << "nsid 0: the lowest floor";
}

// The arbiter alone, on a clock of its own: reads of 1 ms with every fifth
// answered in 20 us (a virtual disk's host cache). The floor is the probe's
// median, 1 ms, so the budget stays whole while reads take 1 ms; with the
// fastest read as the floor, 2x 20 us could never be met and the budget
// would fall to a command per client.
TEST(FairShare, TheFloorIsTheProbesMedianNotAFastOutlier) {
  detail::latency_target lt;
  lt.factor = 2;
  const uint64_t budget = 64 * 4096;
  detail::share_arbiter arb(budget, lt, 4);
  auto a = arb.account(1), b = arb.account(2);
  arb.begin(*a);  // two clients with commands waiting or in flight
  arb.begin(*b);
  uint64_t t = 1'000'000'000;
  for (int k = 0; k < 4000; ++k) {
    t += 100'000;
    arb.completed(1, k % 5 == 4 ? 20'000 : 1'000'000, t);
  }
  EXPECT_GE(arb.latency_floor_ns(1), 990'000u) << "the median of the probe, not its fastest read";
  EXPECT_LE(arb.latency_floor_ns(1), 1'000'000u);
  EXPECT_EQ(arb.budget(), budget) << "reads at their floor: the target holds nothing back";
  arb.finish(*a, 1, 0);
  arb.finish(*b, 1, 0);
}

// Pollers reserve a client's share for several commands at once; several
// pollers reserving for one client at the same moment must not together
// take more than its share.
TEST(FairShare, PollersReservingForOneClientAtOnceStayWithinItsShare) {
  detail::share_arbiter arb(64 * 1024, {}, 4, 4);
  auto a = arb.account(1), b = arb.account(2);
  arb.set_share(2, {3.0, 0});
  arb.begin(*a);
  arb.begin(*b);  // a's share: a quarter, 16 KiB
  constexpr uint64_t share = 16 * 1024;
  std::atomic<uint64_t> over{0}, granted{0};
  std::vector<std::thread> pollers;
  for (unsigned p = 0; p < 4; ++p)
    pollers.emplace_back([&] {
      for (int k = 0; k < 200'000; ++k) {
        const uint64_t got = arb.reserve(*a, 4096, 3 * 4096);
        if (got == 0) continue;
        if (got < 4096 || a->in_flight.load() > share) over.fetch_add(1);
        granted.fetch_add(1);
        arb.finish(*a, 0, got);
      }
    });
  for (auto& t : pollers) t.join();
  EXPECT_EQ(over.load(), 0u) << "reservations beyond the client's share";
  EXPECT_GT(granted.load(), 0u);
  EXPECT_EQ(a->in_flight.load(), 0u);
  // Counters kept per poller add up.
  a->shard(0).reads.add(2);
  a->shard(3).reads.add(5);
  a->shard(2).bytes_read.add(4096);
  EXPECT_EQ(a->snapshot().reads, 7u);
  EXPECT_EQ(a->snapshot().bytes_read, 4096u);
  arb.finish(*a, 1, 0);
  arb.finish(*b, 1, 0);
  EXPECT_EQ(arb.active_weight(), 0u);
}

// The rule behind the test above, on the arbiter alone: a poller leaves
// freed room to an older waiter on another poller, not to its own, and
// not to one only a little older.
TEST(FairShare, FreedRoomGoesToAnOlderWaiterOnAnotherPoller) {
  detail::share_arbiter arb(64 * 1024, {}, 4, 2);
  auto a = arb.account(1);
  ASSERT_EQ(a->shard_count, 2u);
  EXPECT_FALSE(arb.older_waiter(*a, 0, 1'000'000)) << "nobody waits";
  a->waiter(1).since.store(500'000);
  EXPECT_TRUE(arb.older_waiter(*a, 0, 1'000'000));
  EXPECT_FALSE(arb.older_waiter(*a, 1, 1'000'000)) << "its own poller's waiter";
  EXPECT_FALSE(arb.older_waiter(*a, 0, 500'000 + detail::share_arbiter::waiter_grace_ns)) << "within the grace";
  EXPECT_FALSE(arb.older_waiter(*a, 0, 400'000)) << "a younger waiter";
  a->waiter(1).since.store(0);
  EXPECT_FALSE(arb.older_waiter(*a, 0, 1'000'000)) << "the waiter was served";
}

TEST(FairShare, TheLatencyTargetMustBeAFactorOfAtLeastOne) {
  controller_config cc;
  cc.io_budget_bytes = 1 << 20;
  cc.latency_target = 0.5;
  EXPECT_THROW(controller{cc}, deepwell::error);
}

TEST(FairShare, TheArbiterForgetsClientsThatGoIdle) {
  detail::share_arbiter arb(64 * 1024);
  auto a = arb.account(1), b = arb.account(2);
  arb.set_share(2, {3.0, 0});
  arb.begin(*a);
  EXPECT_TRUE(arb.try_admit(*a, 4096, 1));
  arb.begin(*b);
  EXPECT_EQ(arb.active_weight(), 4000u);
  EXPECT_TRUE(arb.try_admit(*b, 4096, 1)) << "nothing in flight: always admitted";
  // a may have 16 KiB (a quarter) in flight: 3 more of 4 KiB, not 4.
  for (int i = 0; i < 3; ++i) {
    arb.begin(*a);
    EXPECT_TRUE(arb.try_admit(*a, 4096, 1));
  }
  arb.begin(*a);
  EXPECT_FALSE(arb.try_admit(*a, 4096, 1));
  arb.finish(*a, 1, 0);  // given up (its queue went)
  for (int i = 0; i < 4; ++i) arb.finish(*a, 1, 4096);
  arb.finish(*b, 1, 4096);
  EXPECT_EQ(arb.active_weight(), 0u);
  EXPECT_EQ(a->in_flight.load(), 0u);
  EXPECT_THROW(arb.set_share(1, {0.0, 0}), deepwell::error);
}

// A share smaller than two commands, over many queues served by two
// pollers: every queue must keep moving. Two ways this went wrong: queues
// waiting for the share each kept a fragment of credit, together enough
// that no command fit while none was in flight (a stall); and each poller
// offered the freed share to its queues in the same order every pass, so
// its first busy queue took it every time (the rest starved, and a GPU
// kernel waits for its slowest queue).
TEST(FairShare, EveryQueueOfAClientWithAShareUnderTwoCommandsKeepsMoving) {
  controller_config cc;
  cc.pollers = 2;
  cc.io_budget_bytes = 6 * 1024;  // one 4 KiB command in flight, and a half
  controller ctl(cc);
  auto slow = make_fault_target(test::pattern_memory(1 << 20, false, 9));
  slow->add_rule({fault_rule::delay, 0, UINT64_MAX, 0, 500'000, 0});  // every read: 0.5 ms
  const uint32_t ns = ctl.add_namespace({slow, 4096, true});
  constexpr int queues = 12, per_queue = 3;
  std::vector<std::unique_ptr<host_queue_client>> qs;
  for (int i = 0; i < queues; ++i)
    qs.push_back(std::make_unique<host_queue_client>(client_handle(ctl.create_queue_pair({16, 16, 4096}, {nullptr, 1}))));
  std::atomic<bool> stop{false};
  std::vector<std::atomic<uint64_t>> done(queues);
  std::atomic<uint64_t> failed{0};
  std::vector<std::thread> threads;
  for (int q = 0; q < queues; ++q)
    for (int t = 0; t < per_queue; ++t)
      threads.emplace_back([&, q, t] {
        std::vector<uint8_t> buf(4096);
        uint64_t lba = uint64_t(q * 31 + t * 7);
        // A bounded wait: a stalled queue fails the test instead of hanging it.
        while (!stop.load(std::memory_order_relaxed)) {
          if (qs[q]->read(ns, lba++ % 256, 1, 4096, buf.data(), 3'000'000'000ull).ok())
            done[q].fetch_add(1, std::memory_order_relaxed);
          else
            failed.fetch_add(1, std::memory_order_relaxed);
        }
      });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0u) << "reads timed out: a queue stalled";
  uint64_t total = 0, least = UINT64_MAX;
  for (auto& d : done) {
    total += d.load();
    least = std::min<uint64_t>(least, d.load());
  }
  // One command at a time at 0.5 ms: up to 3000 reads, 250 a queue if
  // shared evenly. Each queue must have had a real part of it.
  EXPECT_GT(total, 300u);
  std::string counts;
  for (auto& d : done) counts += " " + std::to_string(d.load());
  RecordProperty("reads_by_queue", counts);
  EXPECT_GE(least, total / queues / 8) << "a queue starved: " << least << " of " << total << " reads; by queue:" << counts;
  EXPECT_EQ(ctl.client_stats(1).in_flight_bytes, 0u) << "all settled";
}

namespace {

// A lone client flooding reads through one queue pair for `settle`, then
// for `measure`: its reads a second, and the budget seen at `samples`
// instants of the measured time (io_budget_now).
struct lone_flood {
  double per_s = 0;
  std::vector<uint64_t> budgets;
};

lone_flood flood_alone(controller& ctl, uint32_t ns, unsigned threads, std::chrono::milliseconds settle,
                       std::chrono::milliseconds measure, int samples) {
  host_queue_client c(client_handle(ctl.create_queue_pair({256, 256, 4096}, {nullptr, 1})));
  std::atomic<bool> stop{false};
  flooder f;
  f.start(c, ns, threads, stop);
  std::this_thread::sleep_for(settle);
  lone_flood r;
  const uint64_t before = f.done.load();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < samples; ++i) {
    std::this_thread::sleep_for(measure / samples);
    r.budgets.push_back(ctl.io_budget_now());
  }
  r.per_s = double(f.done.load() - before) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop = true;
  f.join();
  EXPECT_EQ(f.failed.load(), 0u);
  return r;
}

}  // namespace

// A lone client held back by the budget on storage that serves reads in
// parallel (each 2 ms, any number at once) gets more in flight, window by
// window, while its latency holds; a second client ends that at once.
TEST(FairShare, ALoneClientGoesAboveTheBudgetWhileTheStorageServesItInParallel) {
  controller_config cc;
  cc.pollers = 1;
  cc.io_budget_bytes = 8 * 4096;  // 8 reads in flight: 4,000 a second at 2 ms
  cc.latency_target = 2;
  controller ctl(cc);
  auto slow = make_fault_target(test::pattern_memory(1 << 20, false, 4));
  slow->add_rule({fault_rule::delay, 0, UINT64_MAX, 0, 2'000'000, 0});
  const uint32_t ns = ctl.add_namespace({slow, 4096, true});
  const lone_flood r = flood_alone(ctl, ns, 96, std::chrono::milliseconds(300), std::chrono::milliseconds(500), 10);
  EXPECT_GT(*std::max_element(r.budgets.begin(), r.budgets.end()), cc.io_budget_bytes);
  EXPECT_LE(*std::max_element(r.budgets.begin(), r.budgets.end()), 64 * cc.io_budget_bytes);
#ifndef DEEPWELL_TSAN_BUILD  // (its poller's pace, not the budget, sets the rate there)
  EXPECT_GT(r.per_s, 1.5 * 4000.0) << "the budget alone allows about 4,000 reads a second";
#endif
  // The flood is over; a second client's first command finds the budget
  // back where it was configured (its share: half of it with two clients).
  host_queue_client flood(client_handle(ctl.create_queue_pair({16, 16, 4096}, {nullptr, 1})));
  host_queue_client other(client_handle(ctl.create_queue_pair({16, 16, 4096}, {nullptr, 2})));
  std::atomic<bool> stop{false};
  flooder f;
  f.start(flood, ns, 16, stop);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::vector<uint8_t> buf(4096);
  EXPECT_TRUE(other.read(ns, 3, 1, 4096, buf.data()).ok());
  EXPECT_LE(ctl.io_budget_now(), cc.io_budget_bytes);
  stop = true;
  f.join();
}

// The lone client's rule, window by window, on an arbiter fed completions
// whose latencies the test chooses (no threads, no clock: what a loaded
// machine's scheduling would blur). Storage that serves more in parallel
// keeps its latency as the budget grows; storage that queues answers in
// proportion to what is in flight.
namespace {

struct arbiter_run {
  static constexpr uint64_t budget = 8 * 4096, window = 10'000'000;
  detail::share_arbiter arb{budget, [] {
                              detail::latency_target t;
                              t.factor = 2;
                              return t;
                            }(),
                            8, 1};
  std::shared_ptr<detail::client_account> a = arb.account(1);
  uint64_t now = 1'000'000'000;
  arbiter_run() { arb.begin(*a); }
  // One window of `n` commands of namespace `ns` done in `latency_ns` each,
  // the client held back by its share in it if `refused`; the budget after.
  uint64_t step(uint32_t ns, uint64_t latency_ns, bool refused = true, uint32_t n = 32) {
    if (refused) {  // a reservation that does not fit: room taken, then given back
      const uint64_t room = arb.allowed(*a);
      a->in_flight.fetch_add(room);
      EXPECT_EQ(arb.reserve(*a, 4096, 4096), 0u);
      a->in_flight.fetch_sub(room);
    }
    for (uint32_t i = 0; i < n; ++i) arb.completed(ns, latency_ns, now + i * (window / n));
    now += window + 1;
    arb.completed(ns, latency_ns, now);  // ends the window
    return arb.budget();
  }
  // A window of `n` reads of `read_ns` and `n` writes of `write_ns` each.
  uint64_t step_mixed(uint32_t ns, uint64_t read_ns, uint64_t write_ns, uint32_t n = 32) {
    const uint64_t room = arb.allowed(*a);  // held back by its share
    a->in_flight.fetch_add(room);
    EXPECT_EQ(arb.reserve(*a, 4096, 4096), 0u);
    a->in_flight.fetch_sub(room);
    for (uint32_t i = 0; i < n; ++i) {
      arb.completed(ns, read_ns, now + i * (window / n), 0, true);
      arb.completed(ns, write_ns, now + i * (window / n), 0, false);
    }
    now += window + 1;
    arb.completed(ns, read_ns, now, 0, true);  // ends the window
    return arb.budget();
  }
  // Latency that grows with what is in flight (one command at a time).
  uint64_t queued(uint64_t per_command_ns) const { return per_command_ns * (arb.budget() / 4096); }
};

}  // namespace

TEST(FairShare, TheLoneClientsRuleWindowByWindow) {
  {  // Parallel storage: 4x a window while held back, up to 64x; none when not held back.
    arbiter_run r;
    EXPECT_EQ(r.step(1, 2'000'000), 4 * r.budget);   // the latency at the budget learnt, and a try
    EXPECT_EQ(r.step(1, 2'000'000), 16 * r.budget);  // it held: more
    EXPECT_EQ(r.step(1, 2'000'000), 64 * r.budget);
    EXPECT_EQ(r.step(1, 2'000'000), 64 * r.budget);  // the ceiling
    EXPECT_EQ(r.step(1, 2'000'000, false), 64 * r.budget);
    // A second client: back to the budget before any window ends.
    auto b = r.arb.account(2);
    r.arb.begin(*b);
    EXPECT_EQ(r.arb.budget(), r.budget);
  }
  {  // Storage that queues: a try holds one window over, steps back after the
     // second, and waits 100 ms, then 200 ms.
    arbiter_run r;
    EXPECT_EQ(r.step(1, r.queued(100'000)), 4 * r.budget);
    EXPECT_EQ(r.step(1, r.queued(100'000)), 4 * r.budget);  // 4x the latency once: held, not grown
    EXPECT_EQ(r.step(1, r.queued(100'000)), r.budget);      // twice in a row: back
    for (int i = 0; i < 8; ++i) EXPECT_EQ(r.step(1, r.queued(100'000)), r.budget) << "window " << i;  // 90 ms
    int tries = 0;
    uint64_t was = r.budget;
    for (int i = 0; i < 40; ++i) {  // the next 400 ms
      const uint64_t now = r.step(1, r.queued(100'000));
      tries += now > r.budget && was == r.budget;
      was = now;
    }
    EXPECT_EQ(tries, 2) << "one try after 100 ms, the next 200 ms after it, none in 400 ms more";
  }
  {  // A try's history is its client's: a client that queued waits before it
     // tries again; the next client to come alone tries at its first window.
    arbiter_run r;
    for (int i = 0; i < 3; ++i) r.step(1, r.queued(100'000));
    ASSERT_EQ(r.arb.budget(), r.budget);  // stepped back, waiting 100 ms
    EXPECT_EQ(r.step(1, r.queued(100'000)), r.budget);  // still waiting
    r.arb.finish(*r.a, 1, 0);
    auto b = r.arb.account(2);
    r.arb.begin(*b);
    r.a = b;  // the windows' reservations are the new client's now
    EXPECT_EQ(r.step(1, r.queued(100'000)), 4 * r.budget);
    // The first client back alone after it: its own history is gone too
    // (another client ran since), so it tries at once as well.
    for (int i = 0; i < 2; ++i) r.step(1, r.queued(100'000));
    ASSERT_EQ(r.arb.budget(), r.budget);
    r.arb.finish(*b, 1, 0);
    auto a = r.arb.account(1);
    r.arb.begin(*a);
    r.a = a;
    EXPECT_EQ(r.step(1, r.queued(100'000)), 4 * r.budget);
  }
  {  // Reads weighed apart: write-backs ten times slower than the reads
     // (a burst of output written back) do not read as queueing while the
     // reads stay as fast as at the budget; slower reads still do.
    arbiter_run r;
    EXPECT_EQ(r.step_mixed(1, 1'000'000, 1'000'000), 4 * r.budget);
    EXPECT_EQ(r.step_mixed(1, 1'000'000, 10'000'000), 16 * r.budget);
    EXPECT_EQ(r.step_mixed(1, 1'000'000, 10'000'000), 64 * r.budget);
    EXPECT_EQ(r.step_mixed(1, 5'000'000, 10'000'000), 64 * r.budget);  // reads over: held
    EXPECT_EQ(r.step_mixed(1, 5'000'000, 10'000'000), 16 * r.budget);  // twice: a step back
  }
  {  // One slow window among good ones (a burst of disk reads) does not undo
     // the growth; the base at the budget is smoothed over its windows.
    arbiter_run r;
    EXPECT_EQ(r.step(1, 2'000'000), 4 * r.budget);
    EXPECT_EQ(r.step(1, 2'000'000), 16 * r.budget);
    EXPECT_EQ(r.step(1, 9'000'000), 16 * r.budget);  // over once: held
    EXPECT_EQ(r.step(1, 2'000'000), 64 * r.budget);  // fine again: the try goes on
    EXPECT_EQ(r.step(1, 9'000'000), 64 * r.budget);
    EXPECT_EQ(r.step(1, 9'000'000), 16 * r.budget);  // over twice in a row: a step back
  }
  {  // Per namespace: grown on slow parallel storage (20 ms), then on a device
     // that queues: what it learnt on the first says nothing of the second,
     // which it learns at the budget first, and whose 4x latency (3.2 ms,
     // well within twice the first one's) is over twice its own.
    arbiter_run r;
    for (int i = 0; i < 3; ++i) r.step(1, 20'000'000);
    ASSERT_EQ(r.arb.budget(), 64 * r.budget);
    EXPECT_EQ(r.step(2, r.queued(100'000)), r.budget);  // a namespace new to it: back to learn it
    EXPECT_EQ(r.step(2, r.queued(100'000)), 4 * r.budget);  // learnt (0.8 ms), a try
    EXPECT_EQ(r.step(2, r.queued(100'000)), 4 * r.budget);  // 3.2 ms: over twice its own, once
    EXPECT_EQ(r.step(2, r.queued(100'000)), r.budget);      // and again
  }
}
