// The controller's insides that its two halves share: a namespace's entry,
// a queue pair's poller-private state, and the poller (poller.cpp: the loop
// that fetches, checks, runs and completes commands; controller.cpp:
// namespaces, queue pairs' lifecycle, tenancy and the counters).
#pragma once

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "controller/command_check.hpp"
#include "controller/share_arbiter.hpp"
#include "deepwell/controller/controller.hpp"
#include "deepwell/targets/io_engine.hpp"

namespace deepwell {

// ---------------------------------------------------------------------------
// Namespaces

struct controller::ns_entry {
  detail::ns_limits limits;
  namespace_info info;
  std::shared_ptr<target> data;
};

// ---------------------------------------------------------------------------
// Queue pair state private to the poller that serves it.

namespace detail {

struct pending_completion {
  nvme::completion cqe;
  bool owns_cid;  // clears the cid's outstanding bit when posted
};

}  // namespace detail

struct queue_pair::impl {
  // Trusted geometry (the controller's copy; never read back from shared memory).
  qp_header* header = nullptr;
  nvme::command* sq = nullptr;
  nvme::completion* cq = nullptr;
  uint8_t* staging = nullptr;
  uint32_t sq_entries = 0, cq_entries = 0;
  detail::queue_limits limits;

  // Poller-private progress.
  uint32_t sq_head = 0;
  uint32_t cq_tail = 0;
  uint32_t phase = 1;
  bool failed = false;
  std::vector<uint64_t> cid_busy = std::vector<uint64_t>(65536 / 64);  // outstanding command ids

  // Completions waiting for room in the CQ (a ring: never more than cq_entries).
  std::vector<detail::pending_completion> pending;
  uint32_t pending_head = 0, pending_count = 0;

  // Commands fetched and not yet posted; the controller stops fetching at
  // cq_entries - 1 so that every fetched command has room to complete.
  std::atomic<uint32_t> outstanding{0};
  std::atomic<bool> deleted{false};  // delete_queue_pair: drop once nothing is outstanding

  // Server mode: whose queue this is and what it may name.
  std::shared_ptr<const access_grants> grants;   // nullptr: every namespace
  std::shared_ptr<detail::client_account> account;  // nullptr: embedded (no arbitration)
  // A command fetched and waiting for its client's share (server mode);
  // it was copied out of the SQ already, so it stays the one that was checked.
  nvme::command held{};
  bool has_held = false;
  uint64_t held_since = 0;
  bool waiting = false;  // the held command was refused its client's share (or rate): published to other pollers
  // Where the poller keeps it (poller-private): its client's group, and
  // whether it is on the lists of queues to post to and to settle.
  uint32_t group = 0;
  bool listed_post = false, listed_settle = false;
  // The queue's dealings with its client's account, kept here and told
  // to the account only when they change its state (give_back), not once a
  // command: several pollers serve one client, and per-command updates of
  // its shared account cost a sixth to a third of a page-cache read
  // (share_arbiter.hpp).
  uint64_t credit = 0;   // bytes of the share reserved and not charged to a command: the next ones use them
  uint32_t taken = 0;    // commands taken from the SQ and not finished (held or in flight)
  bool told_busy = false;  // the account counts this queue as active (a begin() not yet finished)

  // Written by the poller alone.
  detail::single_writer_counter commands, reads, writes, flushes, bytes_read, bytes_written, errors;

  bool cid_is_busy(uint16_t cid) const { return (cid_busy[cid / 64] >> (cid % 64)) & 1; }
  void set_cid(uint16_t cid, bool busy) {
    const uint64_t bit = uint64_t(1) << (cid % 64);
    cid_busy[cid / 64] = busy ? (cid_busy[cid / 64] | bit) : (cid_busy[cid / 64] & ~bit);
  }
};

// ---------------------------------------------------------------------------
// Pollers

// Member order matters: `io` is declared last so that it is destroyed
// first; its destructor waits for operations in flight, which write into the
// queues' staging and call back into the contexts.
struct controller::poller {
  controller* owner = nullptr;
  unsigned index = 0;
  std::thread thread;
  std::atomic<clockid_t> cpu_clock{};
  std::atomic<bool> cpu_clock_valid{false};
  std::atomic<double> final_cpu_seconds{0.0};

  std::mutex incoming_mutex;
  std::vector<std::shared_ptr<queue_pair>> incoming;  // handed over by create_queue_pair
  std::atomic<bool> has_incoming{false};
  std::condition_variable incoming_cv;  // a poller with no queues waits here (incoming_mutex)
  std::atomic<bool> has_deleted{false};  // some queue of this poller was deleted
  std::vector<std::shared_ptr<queue_pair>> queues;    // owned by the poller thread

  struct context {
    poller* p;
    queue_pair::impl* q;
    uint16_t cid;
    uint8_t opcode;
    uint32_t bytes;
    context* next_free;
    // What a retry needs: -EAGAIN and -EINTR are not final answers.
    const ns_entry* ns;
    uint8_t* buf;
    uint64_t offset;
    bool fua;
    uint32_t retries;
    // Server mode: the bytes the client's share was charged, and when the
    // command was fetched (latency).
    uint32_t cost;
    uint64_t fetched_ns;
    uint64_t admitted_ns;  // when it went to the target (the storage's latency starts)
  };
  std::vector<std::unique_ptr<context[]>> context_blocks;
  context* free_contexts = nullptr;
  bool draining = false;  // stop(): every completion becomes an abort
  bool quiescing = false;  // drop_deleted() waits for the engine to empty: no new fetches
  // Server mode, while several clients have queues: each client takes at
  // most its quota of commands a pass (pass_quota), over all its queues: a
  // client with hundreds of queues would otherwise make every pass, and so
  // another client's next command, wait for hundreds of batches.
  uint64_t pass_no = 0;
  // A pass visits clients, not queues: a client that took its quota, or
  // was refused its share or rate, is left at once (its other queues would
  // be refused too), and only queues with completions to post or dealings
  // to settle with their account are visited after the storage's turn. So
  // a pass costs the commands it serves plus a step per client, however
  // many queues a flooding client holds (one step per queue made a pass
  // over 256 flooding queues last 40 us on an H200 machine, and a light
  // client's next command waited for it).
  struct client_queues {
    detail::client_account* account = nullptr;  // nullptr: the embedded controller's queues
    std::vector<queue_pair::impl*> queues;
    size_t next = 0;         // where the next pass starts: moves on one queue a pass, so that when the
                             // client's share frees room for one command, each waiting queue is in turn
                             // the first offered it (a fixed order gave it to the same queue every time)
    uint32_t waiting = 0;    // its queues whose held command was refused its share
    bool saturated = false;  // took its quota or was refused in its last pass: it goes after the others
  };
  std::vector<client_queues> groups;
  size_t first_group = 0;    // rotates, among the unsaturated and among the saturated
  bool stop_client = false;  // fetch(): the client of the queue just served is done for this pass
  std::vector<queue_pair::impl*> to_post, to_settle;
  std::vector<uint32_t> light, heavy;  // serve_pass's order of the groups
  static constexpr uint64_t light_recheck_ns = 5000;
  void regroup();
  void finish_turn(unsigned& work);
  void list_post(queue_pair::impl& q);
  void list_settle(queue_pair::impl& q);
  void serve_group(client_queues& g, unsigned& work);
  std::atomic<uint64_t> passes{0};  // pass_no for other threads (poller_passes)
  // A retired namespace's entry is freed only once no poller can still
  // hold it (controller::retire_namespace): every poller has begun a turn
  // of its loop since (or waits with no queue at all), and the commands
  // each poller has in flight on that namespace id are done. `turns` and
  // `parked` are stored sequentially consistent (the retirer stores the
  // empty slot, then loads them); the counts are this poller's alone.
  std::atomic<uint64_t> turns{0};
  std::atomic<bool> parked{false};
  std::unique_ptr<std::atomic<uint32_t>[]> ns_in_flight;  // by nsid - 1
  void ns_started(uint32_t nsid) {
    auto& n = ns_in_flight[nsid - 1];
    n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  void ns_done(uint32_t nsid) {
    auto& n = ns_in_flight[nsid - 1];
    n.store(n.load(std::memory_order_relaxed) - 1, std::memory_order_release);
  }
  uint32_t pass_quota(detail::client_account& a) const;
  // Server mode's clock for client accounts (latency, shares): read once a
  // fetch and once before each reap, not once a command (a clock read costs
  // about as much as the rest of a command's accounting).
  uint64_t clock_ns = 0;
  // Server mode: queues whose held command was refused its share, and
  // whether the last publish_waiters() left any waiter_slot set.
  uint32_t waiting_queues = 0;
  bool published_waiter = false;
  std::unique_ptr<io_engine> io;

  void run();
  void serve_until_stopped();
  unsigned serve_pass();
  unsigned fetch(queue_pair::impl& q);
  void execute(queue_pair::impl& q, const nvme::command& c, uint32_t cost, uint64_t fetched_ns,
               uint64_t admitted_ns = 0);
  void settle(queue_pair::impl& q, uint8_t opcode, uint32_t cost, uint64_t fetched_ns, uint64_t bytes, bool ok,
              uint64_t admitted_ns = 0, uint32_t nsid = 0);
  uint32_t cost_of(const queue_pair::impl& q, const nvme::command& c) const;
  void complete(queue_pair::impl& q, uint16_t cid, nvme::status s, bool owns_cid, uint32_t dw0 = 0,
                uint32_t dw1 = 0);
  unsigned post(queue_pair::impl& q);
  void fail_queue(queue_pair::impl& q, queue_failure why);
  bool read_doorbell(queue_pair::impl& q, const uint32_t* bell, uint32_t entries, queue_failure why, uint32_t& value);
  void release_held(queue_pair::impl& q);
  void set_waiting(queue_pair::impl& q, bool waiting);
  void publish_waiters();
  void give_back(queue_pair::impl& q);
  void fail_all(const char* what);
  void issue(context* c);
  void adopt_incoming();
  void drop_deleted();
  void register_staging();
  void drain();
  context* alloc_context();
  void free_context(context* c);
  static void on_io_done(void* ctx, int64_t result);
  const ns_entry* ns(uint32_t nsid) const;
};

}  // namespace deepwell
