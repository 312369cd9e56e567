// The controller: a trusted service on the host that serves NVMe-style queue
// pairs from targets. It runs in-process (this class) and owns
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

#include "deepwell/io_engine.hpp"
#include "deepwell/nvme.hpp"
#include "deepwell/queue_layout.hpp"
#include "deepwell/shared_region.hpp"
#include "deepwell/target.hpp"

namespace deepwell {

struct namespace_config {
  std::shared_ptr<target> data;
  uint32_t block_size = 4096;  // 512 B to 64 KiB, a power of two
  bool read_only = false;      // also forced when the target is not writable
};

struct namespace_info {
  uint32_t nsid = 0;
  uint32_t block_size = 0;
  uint64_t blocks = 0;  // ceil(bytes / block_size)
  uint64_t bytes = 0;
  bool read_only = false;
  std::string description;
};

struct controller_config {
  unsigned pollers = 1;
  io_backend backend = io_backend::automatic;  // DEEPWELL_IO overrides `automatic`
  unsigned io_depth = 512;                     // per poller
  bool register_buffers = true;  // io_uring fixed buffers where RLIMIT_MEMLOCK allows
  uint32_t spin_us = 100;        // busy-poll this long after the last work, then sleep (DEEPWELL_POLLER_SPIN_US)
  uint32_t max_sleep_us = 200;   // longest sleep between doorbell checks when idle
  // Commands a poller takes from one queue before it moves on (0: all that
  // are there). Completions of commands served on the spot (host memory)
  // are posted before the poller moves on, so a small batch hands the GPU
  // its data sooner: 4 KiB misses through the controller ran x1.2 faster
  // with 16 than with no limit (docs/benchmarks.md). DEEPWELL_POLLER_BATCH
  // overrides it.
  uint32_t fetch_batch = 16;
  uint32_t stop_timeout_ms = 2000;  // how long stop() waits for in-flight I/O and CQ space
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
  uint32_t add_namespace(const namespace_config& ns);
  namespace_info info(uint32_t nsid) const;
  uint32_t namespace_count() const;
  // Host memory holding the namespace's data, if its target has it (the
  // direct tier: readers may bypass the controller). nullptr otherwise.
  void* host_pointer(uint32_t nsid) const;
  // A read-only mapping of the namespace's file, if its target is a file
  // (the direct tier for data in the page cache). nullptr otherwise.
  std::shared_ptr<host_mapping> map_readonly(uint32_t nsid) const;

  // Creates a queue pair served by one of the pollers (round robin).
  // Entries: powers of two, 2 to 65536; slot_bytes: a multiple of 512.
  std::shared_ptr<queue_pair> create_queue_pair(const qp_geometry& g = {});

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

 private:
  controller_config cfg_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mutex_;  // set-up only: namespaces, queue creation
  static constexpr uint32_t max_namespaces = 1024;
  std::unique_ptr<std::unique_ptr<ns_entry>[]> namespaces_;
  std::atomic<uint32_t> ns_count_{0};
  std::vector<std::unique_ptr<poller>> pollers_;
  std::vector<std::shared_ptr<queue_pair>> queues_;
  uint32_t next_qid_ = 1;
  std::string failure_;  // what made a poller fail its queues (guarded by mutex_)
};

}  // namespace deepwell
