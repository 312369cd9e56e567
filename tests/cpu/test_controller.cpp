// The controller and the queue protocol end to end, with CPU clients:
// round trips of every command, validation of every field, faults, bad
// doorbells, a full completion queue, stop(), and concurrency.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <random>
#include <thread>
#include <vector>

#include "controller_test_support.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/link/host_client.hpp"
#include "env_guard.hpp"
#include "test_util.hpp"

using namespace deepwell;
namespace sc = deepwell::nvme::sc;

namespace {

std::shared_ptr<target> pattern_memory(uint64_t bytes, bool writable = true, uint64_t seed = 0) {
  return test::pattern_memory(bytes, writable, seed);
}

class ControllerTest : public test::backend_param_test {};
using test::backend_label;

}  // namespace

TEST_P(ControllerTest, ReadWriteFlushIdentifyRoundTrip) {
  controller ctl(config());
  const uint64_t bytes = 1 << 20;
  auto mem = pattern_memory(bytes);
  const uint32_t ns = ctl.add_namespace({mem, 4096, false});
  host_queue_client c(ctl.create_queue_pair({64, 64, 16384}));

  nvme::identify_namespace id{};
  ASSERT_TRUE(c.identify(ns, id).ok());
  EXPECT_EQ(id.nsze, bytes / 4096);
  EXPECT_EQ(id.dw_bytes, bytes);
  EXPECT_EQ(id.dw_block_size, 4096u);
  EXPECT_EQ((id.lbaf[0] >> 16) & 0xFF, 12u);
  EXPECT_EQ(id.nsattr, 0);

  std::vector<uint8_t> buf(16384);
  ASSERT_TRUE(c.read(ns, 5, 4, 4096, buf.data()).ok());
  EXPECT_EQ(test::check_pattern(buf.data(), buf.size(), 5 * 4096), -1);

  test::fill_pattern(buf.data(), 8192, 0, /*seed=*/7);
  ASSERT_TRUE(c.write(ns, 100, 2, 4096, buf.data()).ok());
  ASSERT_TRUE(c.flush(ns).ok());
  EXPECT_EQ(test::check_pattern(static_cast<uint8_t*>(mem->host_pointer()) + 100 * 4096, 8192, 0, 7), -1);
  std::vector<uint8_t> back(8192);
  ASSERT_TRUE(c.read(ns, 100, 2, 4096, back.data()).ok());
  EXPECT_EQ(test::check_pattern(back.data(), back.size(), 0, 7), -1);

  const queue_counters q = ctl.counters(c.pair().id());
  EXPECT_EQ(q.commands, 5u);
  EXPECT_EQ(q.reads, 2u);
  EXPECT_EQ(q.writes, 1u);
  EXPECT_EQ(q.flushes, 1u);
  EXPECT_EQ(q.bytes_read, 16384u + 8192u);
  EXPECT_EQ(q.bytes_written, 8192u);
  EXPECT_EQ(q.errors, 0u);
}

TEST_P(ControllerTest, FileNamespaceWithHeaderAndPartialLastBlock) {
  // A dataset that starts 100 bytes into a file and ends mid-block: the
  // last block reads as data then zeros.
  test::scratch_file f;
  const char* path = f.path().c_str();
  int fd = ::open(path, O_WRONLY);
  ASSERT_GE(fd, 0);
  const uint64_t header = 100, data = 3 * 4096 + 1000;
  std::vector<uint8_t> file(header + data + 500, 0xAB);
  test::fill_pattern(file.data() + header, data, 0);
  ASSERT_EQ(write(fd, file.data(), file.size()), ssize_t(file.size()));
  close(fd);
  file_options o;
  o.offset = header;
  o.length = data;
  controller ctl(config());
  const uint32_t ns = ctl.add_namespace({open_file_target(path, o), 4096, true});
  EXPECT_EQ(ctl.info(ns).blocks, 4u);
  host_queue_client c(ctl.create_queue_pair({16, 16, 4096}));
  std::vector<uint8_t> buf(4096, 0xFF);
  ASSERT_TRUE(c.read(ns, 3, 1, 4096, buf.data()).ok());
  EXPECT_EQ(test::check_pattern(buf.data(), 1000, 3 * 4096), -1);
  for (size_t i = 1000; i < 4096; ++i) ASSERT_EQ(buf[i], 0) << "byte " << i << " past the end of the dataset";
  EXPECT_EQ(c.read(ns, 4, 1, 4096, buf.data()).nvme, sc::lba_out_of_range);
  // Read-only: writes are refused.
  EXPECT_EQ(c.write(ns, 0, 1, 4096, buf.data()).nvme, sc::write_to_read_only);
}

TEST_P(ControllerTest, EveryMalformedFieldGetsItsStatus) {
  controller ctl(config());
  auto mem = pattern_memory(1 << 20);
  const uint32_t ns = ctl.add_namespace({mem, 4096, false});
  const uint32_t ro = ctl.add_namespace({pattern_memory(1 << 16), 512, true});
  host_queue_client c(ctl.create_queue_pair({32, 32, 8192}));
  const uint64_t blocks = (1 << 20) / 4096;

  auto status_of = [&](nvme::command cmd, bool keep_prp1 = false) { return c.raw(cmd, keep_prp1).status.nvme; };
  auto rd = [&](uint64_t lba, uint32_t n) { return nvme::make_read(ns, lba, n, 0); };

  nvme::command bad = rd(0, 1);
  bad.opcode = 0x7F;
  EXPECT_EQ(status_of(bad), sc::invalid_opcode);
  bad = rd(0, 1);
  bad.flags = 0x40;  // SGL
  EXPECT_EQ(status_of(bad), sc::invalid_field);
  bad = rd(0, 1);
  bad.nsid = 0;
  EXPECT_EQ(status_of(bad), sc::invalid_namespace);
  bad.nsid = 99;
  EXPECT_EQ(status_of(bad), sc::invalid_namespace);
  bad.nsid = 0xFFFFFFFF;
  EXPECT_EQ(status_of(bad), sc::invalid_namespace);
  EXPECT_EQ(status_of(rd(blocks, 1)), sc::lba_out_of_range);
  EXPECT_EQ(status_of(rd(blocks - 1, 2)), sc::lba_out_of_range);
  EXPECT_EQ(status_of(rd(0xFFFFFFFFFFFFFFFFull, 1)), sc::lba_out_of_range);  // no wrap-around
  EXPECT_TRUE(status_of(rd(blocks - 1, 1)).ok());
  EXPECT_EQ(status_of(rd(0, 3)), sc::invalid_field);  // 12 KiB > the 8 KiB transfer limit
  bad = rd(0, 1);
  bad.cdw12 |= 1u << 20;  // a reserved bit
  EXPECT_EQ(status_of(bad), sc::invalid_field);
  bad = rd(0, 1);
  bad.prp2 = 4096;
  EXPECT_EQ(status_of(bad), sc::invalid_field);
  bad = rd(0, 1);
  bad.cdw13 = 1;
  EXPECT_EQ(status_of(bad), sc::invalid_field);
  // Data buffers must lie inside the queue pair's staging memory.
  const uint64_t staging = uint64_t(c.ref().depth) * c.ref().slot_bytes;
  bad = rd(0, 1);
  bad.prp1 = staging - 2048;
  EXPECT_EQ(status_of(bad, true), sc::data_transfer_error);
  bad.prp1 = staging;
  EXPECT_EQ(status_of(bad, true), sc::data_transfer_error);
  bad.prp1 = 0xFFFFFFFFFFFFF000ull;  // offset + length overflows
  EXPECT_EQ(status_of(bad, true), sc::data_transfer_error);
  bad.prp1 = 2;
  EXPECT_EQ(status_of(bad, true), sc::prp_offset_invalid);
  bad.prp1 = staging - 4096;  // the last slot's second half: inside, fine
  EXPECT_TRUE(status_of(bad, true).ok());
  // Read-only namespace.
  EXPECT_EQ(status_of(nvme::make_write(ro, 0, 1, 0)), sc::write_to_read_only);
  // Flush and Identify with stray fields.
  bad = nvme::make_flush(ns);
  bad.cdw10 = 1;
  EXPECT_EQ(status_of(bad, true), sc::invalid_field);
  bad = nvme::make_identify_namespace(ns, 0);
  bad.cdw10 = 1;  // CNS 1: Identify Controller is not offered
  EXPECT_EQ(status_of(bad), sc::invalid_field);
  bad = nvme::make_identify_namespace(ns, staging - 100);
  EXPECT_EQ(status_of(bad, true), sc::data_transfer_error);
  // None of it touched the data.
  EXPECT_EQ(test::check_pattern(mem->host_pointer(), 1 << 20, 0), -1);
  EXPECT_GE(ctl.counters(c.pair().id()).errors, 20u);
  // And the queue still works.
  std::vector<uint8_t> buf(4096);
  ASSERT_TRUE(c.read(ns, 7, 1, 4096, buf.data()).ok());
  EXPECT_EQ(test::check_pattern(buf.data(), 4096, 7 * 4096), -1);
}

TEST_P(ControllerTest, DuplicateCommandIdIsRejected) {
  // Two commands with the same id outstanding at once: the second gets
  // Command ID Conflict. A slow (delayed) target keeps the first in flight.
  controller ctl(config());
  auto slow = make_fault_target(pattern_memory(1 << 20));
  fault_rule r;
  r.kind = fault_rule::delay;
  r.delay_ns = 200'000'000;
  slow->add_rule(r);
  const uint32_t ns = ctl.add_namespace({slow, 4096, false});
  host_queue_client c(ctl.create_queue_pair({16, 16, 4096}));
  const queue_ref& q = c.ref();
  uint16_t a, b;
  ASSERT_TRUE(q.try_acquire_cid(a));
  ASSERT_TRUE(q.try_acquire_cid(b));
  q.submit(a, nvme::make_read(ns, 0, 1, q.buffer_offset(a)));
  // Forge: submit under b's bookkeeping, but with a's id on the wire.
  nvme::command forged = nvme::make_read(ns, 1, 1, q.buffer_offset(b));
  const uint32_t t = client_atomic<uint32_t>(q.counters->sq_ticket).fetch_add(1);
  forged.cid = a;
  std::memcpy(static_cast<void*>(q.sq + (t & (q.sq_entries - 1))), &forged, sizeof(forged));
  client_atomic<uint32_t>(q.ready[t & (q.sq_entries - 1)]).store(t + 1);
  // Publish by submitting a harmless third command through the normal path.
  uint16_t d;
  ASSERT_TRUE(q.try_acquire_cid(d));
  q.submit(d, nvme::make_flush(ns));
  // The conflict completes at once, before the delayed read: a's slot sees it first.
  wait_result first = q.wait(a, now_ns() + 5'000'000'000ull);
  EXPECT_EQ(first.status.nvme, sc::cid_conflict);
  // The original read still completes, correctly, under the same id.
  wait_result second = q.wait(a, now_ns() + 5'000'000'000ull);
  EXPECT_TRUE(second.status.ok());
  EXPECT_EQ(test::check_pattern(q.buffer(a), 4096, 0), -1);
  EXPECT_TRUE(q.wait(d, now_ns() + 5'000'000'000ull).status.ok());
  q.release_cid(a);
  q.release_cid(b);
  q.release_cid(d);
}

TEST_P(ControllerTest, FaultsReachTheClientAndOthersKeepWorking) {
  controller ctl(config());
  const uint64_t bytes = 1 << 20;
  auto faulty = make_fault_target(pattern_memory(bytes));
  const uint32_t ns = ctl.add_namespace({faulty, 4096, false});
  host_queue_client c(ctl.create_queue_pair({32, 32, 8192}));
  fault_rule r;
  r.kind = fault_rule::fail_read;
  r.offset = 10 * 4096;
  r.length = 4096;
  faulty->add_rule(r);
  r.kind = fault_rule::fail_write;
  r.offset = 20 * 4096;
  faulty->add_rule(r);
  r.kind = fault_rule::fail_write;
  r.offset = 30 * 4096;
  r.error = ENOSPC;
  faulty->add_rule(r);
  r.kind = fault_rule::short_read;
  r.offset = 40 * 4096;
  r.error = EIO;
  faulty->add_rule(r);
  r.kind = fault_rule::fail_flush;
  r.offset = 0;
  r.length = UINT64_MAX;
  r.count = 1;
  faulty->add_rule(r);

  std::vector<uint8_t> buf(8192);
  EXPECT_EQ(c.read(ns, 10, 1, 4096, buf.data()).nvme, sc::unrecovered_read_error);
  EXPECT_EQ(c.read(ns, 9, 2, 4096, buf.data()).nvme, sc::unrecovered_read_error);  // overlaps
  EXPECT_EQ(c.write(ns, 20, 1, 4096, buf.data()).nvme, sc::write_fault);
  EXPECT_EQ(c.write(ns, 30, 1, 4096, buf.data()).nvme, sc::capacity_exceeded);
  EXPECT_EQ(c.read(ns, 40, 1, 4096, buf.data()).nvme, sc::unrecovered_read_error);  // short read
  EXPECT_EQ(c.flush(ns).nvme, sc::write_fault);  // e.g. EIO that surfaced at fsync
  EXPECT_TRUE(c.flush(ns).ok());                  // the rule fired once
  // Everything else is served, byte for byte.
  ASSERT_TRUE(c.read(ns, 11, 2, 4096, buf.data()).ok());
  EXPECT_EQ(test::check_pattern(buf.data(), 8192, 11 * 4096), -1);
  EXPECT_GE(ctl.counters(c.pair().id()).errors, 6u);
}

TEST_P(ControllerTest, BadDoorbellFailsOnlyThatQueue) {
  controller ctl(config());
  const uint32_t ns = ctl.add_namespace({pattern_memory(1 << 20), 4096, false});
  host_queue_client good(ctl.create_queue_pair({16, 16, 4096}));
  host_queue_client bad_sq(ctl.create_queue_pair({16, 16, 4096}));
  host_queue_client bad_cq(ctl.create_queue_pair({16, 16, 4096}));
  std::vector<uint8_t> buf(4096);
  ASSERT_TRUE(bad_cq.read(ns, 0, 1, 4096, buf.data()).ok());

  shared_store_release(&bad_sq.ref().header->sq_tail_doorbell, 1000u);
  shared_store_release(&bad_cq.ref().header->cq_head_doorbell, 77u);
  ASSERT_TRUE(bad_cq.write(ns, 0, 1, 4096, buf.data(), 2'000'000'000ull).code == client_code::controller_lost);
  // The bad SQ doorbell is noticed on the next poll.
  for (int i = 0; i < 2000 && bad_sq.pair().state() != queue_state::failed; ++i) usleep(1000);
  EXPECT_EQ(bad_sq.pair().state(), queue_state::failed);
  EXPECT_EQ(shared_load_acquire(&bad_sq.ref().header->failure), uint32_t(queue_failure::bad_sq_doorbell));
  EXPECT_EQ(bad_cq.pair().state(), queue_state::failed);
  EXPECT_EQ(shared_load_acquire(&bad_cq.ref().header->failure), uint32_t(queue_failure::bad_cq_doorbell));
  EXPECT_EQ(bad_sq.read(ns, 0, 1, 4096, buf.data(), 2'000'000'000ull).code, client_code::controller_lost);
  // The good queue is untouched.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(good.read(ns, i, 1, 4096, buf.data()).ok());
    ASSERT_EQ(test::check_pattern(buf.data(), 4096, uint64_t(i) * 4096), -1);
  }
}

TEST_P(ControllerTest, FullCompletionQueueMakesTheControllerWait) {
  // The client submits without consuming: the controller must hold
  // completions back rather than overwrite unconsumed entries.
  controller ctl(config());
  const uint32_t ns = ctl.add_namespace({pattern_memory(1 << 20), 4096, false});
  host_queue_client c(ctl.create_queue_pair({16, 8, 4096}));  // depth 7
  const queue_ref& q = c.ref();
  std::vector<uint16_t> ids;
  uint16_t cid;
  while (q.try_acquire_cid(cid)) ids.push_back(cid);
  ASSERT_EQ(ids.size(), 7u);
  for (size_t i = 0; i < ids.size(); ++i) q.submit(ids[i], nvme::make_read(ns, i, 1, q.buffer_offset(ids[i])));
  usleep(50000);  // let the controller post all it can
  // Exactly 7 completions were posted, in distinct entries with phase 1, the 8th entry untouched.
  int posted = 0;
  for (uint32_t i = 0; i < 8; ++i) posted += nvme::cqe_phase(shared_load_acquire(&q.cq[i].dw3));
  EXPECT_EQ(posted, 7);
  for (size_t i = 0; i < ids.size(); ++i) {
    wait_result r = q.wait(ids[i], now_ns() + 5'000'000'000ull);
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(test::check_pattern(q.buffer(ids[i]), 4096, i * 4096), -1);
    q.release_cid(ids[i]);
  }
  // Wrap the small CQ many times.
  std::vector<uint8_t> buf(4096);
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(c.read(ns, i % 256, 1, 4096, buf.data()).ok());
}

TEST_P(ControllerTest, StopAbortsOutstandingCommands) {
  auto ctl = std::make_unique<controller>(config());
  auto slow = make_fault_target(pattern_memory(1 << 20));
  fault_rule r;
  r.kind = fault_rule::delay;
  r.delay_ns = 100'000'000;
  slow->add_rule(r);
  const uint32_t ns = ctl->add_namespace({slow, 4096, false});
  host_queue_client c(ctl->create_queue_pair({32, 32, 4096}));
  const queue_ref& q = c.ref();
  std::vector<uint16_t> ids(8);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(q.try_acquire_cid(ids[i]));
    q.submit(ids[i], nvme::make_read(ns, i, 1, q.buffer_offset(ids[i])));
  }
  usleep(10000);
  ctl->stop();
  EXPECT_EQ(c.pair().state(), queue_state::stopped);
  for (uint16_t id : ids) {
    wait_result w = q.wait(id, now_ns() + 1'000'000'000ull);
    EXPECT_EQ(w.status.nvme, sc::aborted_sq_deleted);
  }
  // After the stop, requests end with controller_lost instead of hanging.
  std::vector<uint8_t> buf(4096);
  EXPECT_EQ(c.read(ns, 0, 1, 4096, buf.data(), 1'000'000'000ull).code, client_code::controller_lost);
  EXPECT_THROW(ctl->create_queue_pair(), error);
}

TEST_P(ControllerTest, DeadlineEndsAWaitAndTheIdComesBackLater) {
  controller ctl(config());
  auto slow = make_fault_target(pattern_memory(1 << 20));
  fault_rule r;
  r.kind = fault_rule::delay;
  r.delay_ns = 300'000'000;
  r.count = 1;
  slow->add_rule(r);
  const uint32_t ns = ctl.add_namespace({slow, 4096, false});
  host_queue_client c(ctl.create_queue_pair({4, 4, 4096}));  // depth 3
  std::vector<uint8_t> buf(4096);
  const uint64_t t0 = now_ns();
  EXPECT_EQ(c.read(ns, 0, 1, 4096, buf.data(), 20'000'000ull).code, client_code::timeout);
  EXPECT_LT(now_ns() - t0, 250'000'000ull);
  // The abandoned id returns to the pool once its completion arrives: with
  // depth 3, many more requests than that still succeed.
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(c.read(ns, i, 1, 4096, buf.data()).ok());
    ASSERT_EQ(test::check_pattern(buf.data(), 4096, uint64_t(i) * 4096), -1);
  }
}

TEST_P(ControllerTest, ManyThreadsManyQueuesRandomVerifiedRequests) {
  // 64 client threads over 8 queue pairs and 2 pollers: random reads checked
  // byte for byte, and writes to per-thread blocks read back.
  const unsigned threads = 64, queues = 8;
  const uint64_t per_thread = 2'000'000 / threads / test::scale_div / (GetParam() == io_backend::threads ? 4 : 1);
  controller ctl(config(2));
  const uint64_t bytes = 64ull << 20;
  auto mem = pattern_memory(bytes);
  const uint32_t ns = ctl.add_namespace({mem, 512, false});
  const uint64_t blocks = bytes / 512;
  std::vector<std::unique_ptr<host_queue_client>> clients;
  for (unsigned i = 0; i < queues; ++i)
    clients.push_back(std::make_unique<host_queue_client>(ctl.create_queue_pair({256, 256, 4096})));
  // Blocks [0, threads * 8) are written by their owner thread; the rest only read.
  std::atomic<uint64_t> failures{0}, done{0};
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(t * 7919 + 1);
      const host_queue_client& c = *clients[t % queues];
      std::vector<uint8_t> buf(4096);
      uint64_t version = 0;
      for (uint64_t i = 0; i < per_thread; ++i) {
        const uint32_t n = 1 + rng() % 8;
        if (i % 16 == 15) {
          const uint64_t lba = uint64_t(t) * 8;
          ++version;
          test::fill_pattern(buf.data(), 8 * 512, lba * 512, 1000 + version);
          if (!c.write(ns, lba, 8, 512, buf.data()).ok()) ++failures;
          std::fill(buf.begin(), buf.end(), 0);
          if (!c.read(ns, lba, 8, 512, buf.data()).ok() ||
              test::check_pattern(buf.data(), 8 * 512, lba * 512, 1000 + version) != -1)
            ++failures;
        } else {
          const uint64_t lba = threads * 8 + rng() % (blocks - threads * 8 - n);
          if (!c.read(ns, lba, n, 512, buf.data()).ok() ||
              test::check_pattern(buf.data(), uint64_t(n) * 512, lba * 512) != -1)
            ++failures;
        }
        ++done;
      }
    });
  }
  for (auto& th : ts) th.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(done.load(), per_thread * threads);
  const queue_counters tot = ctl.total_counters();
  EXPECT_GE(tot.commands, per_thread * threads);
  EXPECT_EQ(tot.errors, 0u);
}

TEST_P(ControllerTest, SmallFetchBatchesServeDeepQueuesCompletely) {
  // A poller taking 1 or 3 commands per queue per turn (and posting served
  // ones before the next queue's turn) must still serve every command of
  // deep queues, in any interleaving, with the right data; 0 is no limit.
  for (uint32_t batch : {1u, 3u, 0u}) {
    SCOPED_TRACE("fetch_batch " + std::to_string(batch));
    controller_config cfg = config(1);
    cfg.fetch_batch = batch;
    controller ctl(cfg);
    const uint64_t bytes = 8ull << 20;
    auto mem = pattern_memory(bytes, false, batch + 5);
    const uint32_t ns = ctl.add_namespace({mem, 512, false});
    std::vector<std::unique_ptr<host_queue_client>> clients;
    for (unsigned i = 0; i < 3; ++i)
      clients.push_back(std::make_unique<host_queue_client>(ctl.create_queue_pair({64, 64, 4096})));
    const unsigned threads = 24;
    const uint64_t per_thread = 4000 / test::scale_div;
    std::atomic<uint64_t> failures{0};
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        std::mt19937_64 rng(t + 31 * batch);
        std::vector<uint8_t> buf(4096);
        for (uint64_t i = 0; i < per_thread; ++i) {
          const uint32_t n = 1 + rng() % 8;
          const uint64_t lba = rng() % (bytes / 512 - n);
          if (!clients[t % 3]->read(ns, lba, n, 512, buf.data()).ok() ||
              test::check_pattern(buf.data(), uint64_t(n) * 512, lba * 512, batch + 5) != -1)
            ++failures;
        }
      });
    }
    for (auto& th : ts) th.join();
    EXPECT_EQ(failures.load(), 0u);
    EXPECT_EQ(ctl.total_counters().reads, per_thread * threads);
  }
}

// A server takes idle sections' namespaces away (retire_namespace) and
// gives their ids to new ones. Readers of the id meanwhile see either
// dataset whole, or an unknown namespace: never a freed entry (the
// sanitizers' builds run this too), never a block of one and the other.
TEST_P(ControllerTest, RetiredNamespacesFailAtOnceAndTheirIdsServeTheNextDatasetWhole) {
  controller ctl(config());
  const uint64_t bytes = 1 << 20;
  test::scratch_file a(bytes, 11), b(bytes, 12);
  uint32_t ns = ctl.add_namespace({open_file_target(a.path()), 4096, true});
  // Every other id taken: a new namespace can only have a retired one's.
  while (ctl.namespace_count() < controller::max_namespaces) ctl.add_namespace({pattern_memory(4096), 4096, true});
  EXPECT_THROW(ctl.add_namespace({pattern_memory(4096), 4096, true}), error);

  std::atomic<bool> done{false};
  std::atomic<uint64_t> ok{0}, gone{0}, wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t)
    readers.emplace_back([&, t] {
      host_queue_client c(ctl.create_queue_pair({16, 16, 4096}));
      std::mt19937_64 rng(t);
      std::vector<uint8_t> buf(4096);
      while (!done.load()) {
        const uint64_t lba = rng() % (bytes / 4096);
        const request_status s = c.read(ns, lba, 1, 4096, buf.data());
        if (s.ok() && (test::check_pattern(buf.data(), 4096, lba * 4096, 11) == -1 ||
                       test::check_pattern(buf.data(), 4096, lba * 4096, 12) == -1))
          ++ok;
        else if (!s.ok() && s.nvme == sc::invalid_namespace)
          ++gone;
        else
          ++wrong;
      }
    });
  for (int round = 0; round < 40; ++round) {
    const uint32_t before = ns;
    ctl.retire_namespace(ns);
    EXPECT_THROW(ctl.info(before), error);
    const uint32_t again = ctl.add_namespace({open_file_target(round % 2 ? a.path() : b.path()), 4096, true});
    EXPECT_EQ(again, before) << "the retired id is the only one free";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  done = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(ok.load(), 0u);

  // The last dataset (a) is what the id reads now; retired, nothing.
  host_queue_client c(ctl.create_queue_pair({16, 16, 4096}));
  std::vector<uint8_t> buf(4096);
  ASSERT_TRUE(c.read(ns, 7, 1, 4096, buf.data()).ok());
  EXPECT_EQ(test::check_pattern(buf.data(), 4096, 7 * 4096, 11), -1);
  ctl.retire_namespace(ns);
  ctl.retire_namespace(ns);  // again: ignored
  EXPECT_EQ(c.read(ns, 7, 1, 4096, buf.data()).nvme, sc::invalid_namespace);
  EXPECT_EQ(ctl.namespace_count(), controller::max_namespaces - 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, ControllerTest, ::testing::Values(io_backend::uring, io_backend::threads),
                         backend_label);

TEST(ControllerSetup, BadUserInputGetsClearErrors) {
  controller ctl;
  auto mem = make_host_memory_target(1 << 20);
  auto message_of = [&](auto&& f) -> std::string {
    try {
      f();
    } catch (const error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message_of([&] { ctl.add_namespace({mem, 1000, false}); }).find("unsupported block size 1000"),
            std::string::npos);
  EXPECT_NE(message_of([&] { ctl.add_namespace({mem, 256, false}); }).find("unsupported block size 256"),
            std::string::npos);
  EXPECT_NE(message_of([&] { ctl.add_namespace({mem, 131072, false}); }).find("131072"), std::string::npos);
  EXPECT_NE(message_of([&] { ctl.add_namespace({make_host_memory_target(5000), 4096, false}); })
                .find("not a whole number"),
            std::string::npos);
  EXPECT_NE(message_of([&] { ctl.add_namespace({nullptr, 4096, false}); }).find("no target"), std::string::npos);
  EXPECT_NE(message_of([&] { ctl.create_queue_pair({100, 64, 4096}); }).find("powers of two"), std::string::npos);
  EXPECT_NE(message_of([&] { ctl.create_queue_pair({64, 64, 1000}); }).find("multiple of 512"), std::string::npos);
  EXPECT_NE(message_of([&] { ctl.info(42); }).find("no namespace 42"), std::string::npos);
  EXPECT_NE(message_of([&] { open_file_target("/nonexistent/deepwell-data"); }).find("/nonexistent/deepwell-data"),
            std::string::npos);
  EXPECT_NE(message_of([&] { controller_config c; c.pollers = 0; controller x(c); }).find("pollers = 0"),
            std::string::npos);
  {
    test::env_var_guard bad("DEEPWELL_POLLER_BATCH", "sixteen");
    EXPECT_NE(message_of([&] { controller x; }).find("DEEPWELL_POLLER_BATCH=sixteen is not a number"),
              std::string::npos);
  }
}

TEST(ControllerSetup, DirectIoBlockSizeBelowAlignmentIsRefused) {
  // O_DIRECT on a file system whose alignment is above 512 bytes: a 512-byte
  // block size must be refused with both numbers in the message.
  test::scratch_file f;
  const char* path = f.path().c_str();
  ASSERT_EQ(truncate(path, 1 << 20), 0);
  std::shared_ptr<target> t;
  try {
    file_options o;
    o.direct = true;
    t = open_file_target(path, o);
  } catch (const error& e) {
    GTEST_SKIP() << "O_DIRECT not usable here: " << e.what();
  }
  controller ctl;
  const uint32_t align = t->io_alignment();
  if (align <= 512) {
    // Still check that an aligned block size works and that the numbers match.
    EXPECT_NO_THROW(ctl.add_namespace({t, 4096, true}));
  } else {
    try {
      ctl.add_namespace({t, 512, true});
      ADD_FAILURE() << "512-byte blocks accepted with alignment " << align;
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("512"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find(std::to_string(align)), std::string::npos);
    }
  }
}

TEST(ControllerSetup, BlockSizeBelowTargetAlignmentNamesBothNumbers) {
  // A target that demands 4096-byte alignment (as O_DIRECT on a 4Kn disk
  // does), whatever the file system under this test happens to be.
  struct aligned_target : target {
    std::shared_ptr<target> inner = make_host_memory_target(1 << 20);
    uint64_t size() const override { return inner->size(); }
    bool writable() const override { return true; }
    uint32_t io_alignment() const override { return 4096; }
    uint32_t memory_alignment() const override { return 4096; }
    std::string describe() const override { return "test disk"; }
    void read(io_engine& io, void* b, uint32_t l, uint64_t o, io_callback d) override { inner->read(io, b, l, o, d); }
    void write(io_engine& io, const void* b, uint32_t l, uint64_t o, bool f, io_callback d) override {
      inner->write(io, b, l, o, f, d);
    }
    void flush(io_engine& io, io_callback d) override { inner->flush(io, d); }
  };
  controller ctl;
  auto t = std::make_shared<aligned_target>();
  try {
    ctl.add_namespace({t, 512, false});
    ADD_FAILURE() << "512-byte blocks accepted on a 4096-aligned target";
  } catch (const error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("512"), std::string::npos) << m;
    EXPECT_NE(m.find("4096"), std::string::npos) << m;
    EXPECT_NE(m.find("test disk"), std::string::npos) << m;
  }
  // The memory alignment is enforced on data buffers: an offset that is
  // dword-aligned but not 4096-aligned is refused.
  const uint32_t ns = ctl.add_namespace({t, 4096, false});
  host_queue_client c(ctl.create_queue_pair({8, 8, 8192}));
  nvme::command cmd = nvme::make_read(ns, 0, 1, 512);
  EXPECT_EQ(c.raw(cmd, true).status.nvme, sc::prp_offset_invalid);
  cmd.prp1 = 4096;
  EXPECT_TRUE(c.raw(cmd, true).status.ok());
}
