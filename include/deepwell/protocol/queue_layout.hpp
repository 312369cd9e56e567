// The memory of one queue pair, shared by a client and the controller: a
// header with the doorbells and the controller's queue state, the submission
// ring (64-byte NVMe commands), the completion ring (16-byte completions) and
// the staging region that data buffers (PRP1, as an offset) point into.
//
// Every shared field has a single writer (docs/architecture.md, "The protocol"):
//   client writes:     SQ entries, sq_tail_doorbell, cq_head_doorbell, staging (for writes)
//   controller writes: CQ entries, state, failure, staging (for reads)
// The controller keeps its own copy of the geometry and never trusts the
// header's copy, which exists so that another process can map the region.
#pragma once
#include <cstddef>
#include <cstdint>

#include "deepwell/protocol/nvme.hpp"

namespace deepwell {

constexpr uint32_t qp_magic = 0x50515744;  // "DWQP"
constexpr uint32_t qp_version = 1;

enum class queue_state : uint32_t {
  running = 0,
  failed = 1,   // this queue only: a bad doorbell value; see `failure`
  stopped = 2,  // the controller stopped; outstanding commands were aborted
};

enum class queue_failure : uint32_t {
  none = 0,
  bad_sq_doorbell = 1,  // SQ tail doorbell beyond the ring
  bad_cq_doorbell = 2,  // CQ head doorbell beyond the ring
  poller_error = 3,     // the poller serving it met an error it cannot recover from (io_uring, out of memory)
};

struct alignas(128) qp_header {
  uint32_t magic;
  uint32_t version;
  uint32_t qid;
  uint32_t sq_entries;
  uint32_t cq_entries;
  uint32_t depth;       // the most commands a client may have outstanding (cids 0..depth-1)
  uint32_t slot_bytes;  // staging bytes for each command id
  uint32_t reserved;
  uint64_t sq_offset;
  uint64_t cq_offset;
  uint64_t staging_offset;
  uint64_t staging_bytes;
  uint64_t total_bytes;

  alignas(128) uint32_t sq_tail_doorbell;  // client writes: index of the next free SQ slot
  alignas(128) uint32_t cq_head_doorbell;  // client writes: index of the next CQ entry it will read
  alignas(128) uint32_t state;             // controller writes: queue_state
  uint32_t failure;                        // controller writes: queue_failure
};

// Geometry of a queue pair. Entries are powers of two; depth <= min(sq, cq) - 1
// so that the completion queue can never overflow.
struct qp_geometry {
  uint32_t sq_entries = 256;
  uint32_t cq_entries = 256;
  uint32_t slot_bytes = 64 * 1024;  // largest transfer of one command

  uint32_t depth() const { return (sq_entries < cq_entries ? sq_entries : cq_entries) - 1; }
};

struct qp_layout {
  uint64_t sq_offset, cq_offset, staging_offset, staging_bytes, total_bytes;
};

// Staging is aligned to 4 KiB (O_DIRECT buffers; page-aligned GPU mappings).
constexpr uint64_t qp_align = 4096;

inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

inline qp_layout compute_layout(const qp_geometry& g) {
  qp_layout l{};
  l.sq_offset = align_up(sizeof(qp_header), qp_align);
  l.cq_offset = align_up(l.sq_offset + uint64_t(g.sq_entries) * sizeof(nvme::command), qp_align);
  l.staging_offset = align_up(l.cq_offset + uint64_t(g.cq_entries) * sizeof(nvme::completion), qp_align);
  l.staging_bytes = uint64_t(g.depth()) * g.slot_bytes;
  l.total_bytes = align_up(l.staging_offset + l.staging_bytes, qp_align);
  return l;
}

}  // namespace deepwell
