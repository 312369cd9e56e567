// The controller: a trusted service on the host that serves NVMe-style queue
// pairs from targets. It runs in-process (this class; clients reach it
// through a controller_link, controller_link.hpp) and owns
//  - namespaces: datasets over targets, with a logical block size;
//  - queue pairs: SQ/CQ rings and a staging region in shared memory;
//  - poller threads: each owns a set of queue pairs and an io_engine; it
//    reads doorbells, copies each command once, validates the copy, runs it
//    on the target and posts the completion.
// It trusts no client: every field of every command is checked, a bad
// doorbell fails only its queue, and a full completion queue makes the
// controller wait (never overwrite).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "deepwell/common/defaults.hpp"
#include "deepwell/controller/tenancy.hpp"
#include "deepwell/link/controller_link.hpp"
#include "deepwell/protocol/nvme.hpp"
#include "deepwell/protocol/queue_layout.hpp"
#include "deepwell/protocol/shared_region.hpp"
#include "deepwell/targets/io_engine.hpp"
#include "deepwell/targets/target.hpp"

namespace deepwell {

namespace detail {
class share_arbiter;
}

struct namespace_config {
  std::shared_ptr<target> data;
  uint32_t block_size = 4096;  // 512 B to 64 KiB, a power of two
  bool read_only = false;      // also forced when the target is not writable
};

// Defaults come from defaults.hpp (the environment's DEEPWELL_* values,
// else the built-in ones); what code sets here wins over both.
struct controller_config {
  unsigned pollers = defaults::pollers();
  io_backend backend = backend_from_env();     // automatic: io_uring where it works, else threads
  unsigned io_depth = defaults::io_depth();    // per poller
  bool register_buffers = true;  // io_uring fixed buffers where RLIMIT_MEMLOCK allows
  uint32_t spin_us = defaults::poller_spin_us();  // busy-poll this long after the last work, then sleep
  uint32_t max_sleep_us = defaults::poller_max_sleep_us();  // longest sleep between doorbell checks when idle
  // Commands a poller takes from one queue before it moves on (0: all that
  // are there). Completions of commands served on the spot (host memory)
  // are posted before the poller moves on, so a small batch hands the GPU
  // its data sooner (docs/benchmarks.md).
  uint32_t fetch_batch = defaults::poller_batch();
  // Server mode, while two or more clients have queues: the commands a
  // poller's pass takes in all, shared among the clients by weight (each
  // at least one). A light client's command waits for about one flooding
  // client's share of a pass: on an H200 machine, 16 kept a light
  // client's p99 at 4-5x alone beside a flood, 8 within 2x, with the
  // flood's throughput as before the pass was shared (docs/server.md).
  // 0: no quota.
  uint32_t pass_commands = defaults::pass_commands();
  uint32_t stop_timeout_ms = 2000;  // how long stop() waits for in-flight I/O and CQ space
  // Server mode: storage bytes in flight that clients share by weight
  // (tenancy.hpp). 0 (embedded mode, one client): commands are admitted
  // as they come and no client accounts are kept.
  uint64_t io_budget_bytes = 0;
  // Server mode: while several clients use the storage, hold the budget
  // back until the storage's latency is within this factor of its floor
  // (src/controller/share_arbiter.hpp), so that a light client's misses do not wait
  // behind a neighbour's backlog. 0: off (the budget is fixed).
  double latency_target = 0;
};

// Who a queue pair serves (server mode). Default: the embedded client,
// which may name every namespace.
struct queue_options {
  std::shared_ptr<const access_grants> grants;  // nullptr: every namespace, as it allows
  uint32_t client = 0;                          // whose share its commands take (io_budget_bytes > 0)
};

// Per-queue counters (also summed over all queues).
struct queue_counters {
  uint64_t commands = 0;
  uint64_t reads = 0;
  uint64_t writes = 0;
  uint64_t flushes = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t errors = 0;  // commands completed with a non-success status
  queue_counters& operator+=(const queue_counters& o);
};

class controller;

// A queue pair: the controller-side owner of its shared memory. Clients build
// their view with make_queue_ref(base(), client_state, geometry()).
class queue_pair {
 public:
  uint32_t id() const { return id_; }
  const qp_geometry& geometry() const { return geometry_; }
  uint32_t client() const { return client_; }
  void* base() const { return region_.data(); }
  size_t bytes() const { return region_.size(); }
  int memfd() const { return region_.fd(); }
  qp_header* header() const { return static_cast<qp_header*>(region_.data()); }
  queue_state state() const;
  queue_counters counters() const;

 private:
  friend class controller;
  struct impl;
  queue_pair(uint32_t id, const qp_geometry& g, shared_region region);
  uint32_t id_;
  qp_geometry geometry_;
  shared_region region_;
  uint32_t client_ = 0;
  std::unique_ptr<impl> impl_;

 public:
  ~queue_pair();
};

class controller {
 public:
  explicit controller(controller_config cfg = {});
  ~controller();
  controller(const controller&) = delete;
  controller& operator=(const controller&) = delete;

  // Adds a dataset; returns its namespace id (1-based). Throws deepwell::error
  // for an unsupported block size, a block size below the target's direct-I/O
  // alignment, or a writable dataset that does not end on a block boundary.
  // Takes the id of a namespace retired before once nothing can still use
  // it (below), else the next; throws when all max_namespaces are taken.
  uint32_t add_namespace(const namespace_config& ns);
  // Takes namespace `nsid` away (a server's section no client holds):
  // commands naming it fail as for an unknown namespace from now on. The
  // caller must have taken every queue's grant on it first (or deleted the
  // queues), so that no new command may name it; the entry and its target
  // are freed, and the id taken again, once every poller has begun a new
  // turn and the commands in flight on it are done. Unknown ids are ignored.
  void retire_namespace(uint32_t nsid);
  namespace_info info(uint32_t nsid) const;
  // Namespaces served now (added, not retired).
  uint32_t namespace_count() const;
  // Host memory holding the namespace's data, if its target has it (the
  // direct tier: readers may bypass the controller). nullptr otherwise.
  void* host_pointer(uint32_t nsid) const;
  // A read-only mapping of the namespace's file, if its target is a file
  // (the direct tier for data in the page cache). nullptr otherwise.
  std::shared_ptr<host_mapping> map_readonly(uint32_t nsid) const;
  // The namespace's arena of a host-memory tier (target::map_tier), or nullptr.
  std::shared_ptr<host_mapping> map_tier(uint32_t nsid) const;
  // The namespace's target (sections are built over it); nullptr for an unknown id.
  std::shared_ptr<target> target_of(uint32_t nsid) const;

  // Creates a queue pair served by one of the pollers (round robin).
  // Entries: powers of two, 2 to 65536; slot_bytes: a multiple of 512.
  std::shared_ptr<queue_pair> create_queue_pair(const qp_geometry& g = {}, const queue_options& opts = {});
  // Stops serving queue pair `qid` (its client is gone): its poller drops it
  // once the commands it fetched are done, and its shared memory goes with
  // the last reference. Its counters stay in total_counters(). Unknown ids
  // are ignored (idempotent).
  void delete_queue_pair(uint32_t qid);
  // Queue pairs being served (not deleted).
  uint32_t queue_pair_count() const;
  // Passes the pollers made over their queues so far (all pollers): with
  // the time, how long a pass takes, which bounds how long a new command
  // waits to be fetched.
  uint64_t poller_passes() const;
  // The counters of one queue pair; throws for an unknown or deleted one.
  queue_counters counters(uint32_t qid) const;

  // Server mode (io_budget_bytes > 0): a client's weight and rate cap
  // (tenancy.hpp); takes effect for commands not yet admitted. Throws for
  // a weight not in (0, 1e6] or in embedded mode.
  void set_client_share(uint32_t client, const client_share& s);
  // What a client's queue pairs did (server mode); zeros for a client
  // never seen.
  client_counters client_stats(uint32_t client) const;
  // Server mode: forgets a client whose connection ended (its counters and
  // share); its deleted queues keep what they need until they are dropped.
  void forget_client(uint32_t client);
  // Server mode: clients the controller keeps an account for.
  size_t client_account_count() const;
  // Server mode: the I/O budget clients share now (below io_budget_bytes
  // while the latency target holds it back), and the target's estimate of
  // the storage's own latency for namespace `nsid` (0: none yet, or no
  // target; nsid 0: the lowest of any namespace).
  uint64_t io_budget_now() const;
  uint64_t latency_floor_ns(uint32_t nsid = 0) const;

  // Stops the pollers. Every outstanding command completes with an abort
  // status (Command Aborted due to SQ Deletion) and every queue is marked
  // stopped. Idempotent; the destructor calls it.
  void stop();
  bool stopped() const { return stopping_.load(); }

  // The io backend the pollers use ("io_uring" or "threads").
  std::string backend_name() const;
  // CPU seconds the poller threads have used (their own thread clocks).
  double poller_cpu_seconds() const;
  queue_counters total_counters() const;
  // Queue and poller state for watchdogs and bug reports.
  std::string dump() const;

  struct ns_entry;
  struct poller;

  // Namespaces a controller serves at most (ids 1 to this).
  static constexpr uint32_t max_namespaces = 1024;

 private:
  controller_config cfg_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mutex_;  // set-up only: namespaces, queue creation
  // Pollers look a namespace up in `slots_` without a lock; `owned_` keeps
  // the entries (guarded by mutex_), a retired one in `retired_` until no
  // poller can hold it. Ids 1..ns_count_ have been used.
  std::unique_ptr<std::atomic<ns_entry*>[]> slots_;
  std::unique_ptr<std::unique_ptr<ns_entry>[]> owned_;
  std::atomic<uint32_t> ns_count_{0};
  std::atomic<uint32_t> ns_live_{0};
  struct retired_ns {
    uint32_t nsid;
    std::unique_ptr<ns_entry> entry;
    std::vector<uint64_t> turns;  // each poller's when it was retired
  };
  std::vector<retired_ns> retired_;
  std::vector<uint32_t> free_ids_;  // retired ids nothing can use any more
  void collect_retired();           // mutex_ held
  // Namespace nsid, or nullptr when there is none.
  const ns_entry* find_ns(uint32_t nsid) const;
  std::vector<std::unique_ptr<poller>> pollers_;
  std::unique_ptr<detail::share_arbiter> arbiter_;  // server mode only
  std::atomic<uint32_t> clients_with_queues_{0};    // server mode: clients with a queue pair served now
  std::vector<std::shared_ptr<queue_pair>> queues_;
  queue_counters deleted_counters_;  // of deleted queue pairs (guarded by mutex_)
  uint32_t next_qid_ = 1;
  std::string failure_;  // what made a poller fail its queues (guarded by mutex_)
};

// A client's handle of a queue pair made with controller::create_queue_pair
// (tests and benchmarks that drive queues by hand): it maps the memfd as
// any client does and keeps the queue pair alive; it does not delete it.
std::unique_ptr<queue_pair_handle> client_handle(std::shared_ptr<queue_pair> qp);

}  // namespace deepwell
