// What a controller shared by several programs (server mode) needs to keep
// them apart: which namespaces a queue pair may name (grants), and how the
// storage's time is shared between clients (weights, byte-rate limits).
// An embedded controller has one client and uses neither: its queue pairs
// carry no grants and its pollers admit commands as they come.
#pragma once
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <memory>
#include <vector>

namespace deepwell {

// Per-namespace rights of one client. A command naming a namespace it has
// no right to completes with Invalid Namespace (as if it did not exist:
// a client learns nothing of datasets it may not see); a write without the
// write right completes with Attempted Write to Read Only Range.
struct access_grants {
  static constexpr uint8_t none = 0, read = 1, write = 2;
  // Namespace ids below this have a right; the controller's namespace limit.
  static constexpr uint32_t max_nsid = 1024;
  // Rights are added while queue pairs holding them run (a section a client
  // opens is granted to it, and its queues may name it at once), so each is
  // an atomic: pollers read it as the server's thread sets it. Rights are
  // never taken away from a live connection.
  uint8_t of(uint32_t nsid) const {
    return nsid <= max_nsid ? rights_[nsid].load(std::memory_order_acquire) : uint8_t(none);
  }
  // Throws std::out_of_range past max_nsid.
  void set(uint32_t nsid, uint8_t r) {
    if (nsid > max_nsid) throw std::out_of_range("access_grants: namespace id past the limit");
    rights_[nsid].store(r, std::memory_order_release);
  }

 private:
  std::atomic<uint8_t> rights_[max_nsid + 1] = {};  // indexed by nsid (0 unused)
};

// A client's share of the storage. Every client with commands waiting or
// in flight gets io_budget_bytes (controller_config) * weight / (the sum
// of those clients' weights) in flight, at least one command; with a FIFO
// device underneath, throughput follows in-flight bytes (Little's law),
// so two flooding clients get bandwidth in proportion to their weights.
// rate_bytes caps a client's bytes per second (0: no cap).
struct client_share {
  double weight = 1;
  uint64_t rate_bytes = 0;
};

// What a client did (all its queue pairs, live and deleted).
struct client_counters {
  uint64_t commands = 0, reads = 0, writes = 0, flushes = 0, bytes_read = 0, bytes_written = 0, errors = 0;
  uint64_t throttled = 0;       // times a command waited for the client's share or rate
  uint64_t in_flight_bytes = 0; // now
  // Latency of completed reads and writes from fetch to completion, in
  // powers-of-two buckets of microseconds: bucket i counts [2^(i-1), 2^i) us.
  static constexpr int latency_buckets = 32;
  uint64_t latency_us[latency_buckets] = {};
  uint64_t latency_ns_sum = 0;  // the sum of those latencies (a Prometheus histogram's _sum)
  // The p-th percentile (0 < p < 1) of that latency, in microseconds (the
  // bucket's upper bound); 0 when nothing completed.
  double latency_percentile_us(double p) const;
};

}  // namespace deepwell
