// The client side of the queue protocol, written once for CPU threads and GPU
// threads (BaM section 3.3, with the protocol rules of docs/architecture.md).
//
// Submission: a thread holding a command id takes a ticket (an atomic counter
// in client memory); ticket t owns SQ slot t mod N. Holding a command id
// guarantees the slot is free: fewer than N commands are ever outstanding and
// the controller fetches in order. The thread writes its command, fences at
// system scope, and marks the slot ready with t + 1. Whoever then holds the
// tail lock sweeps the tail over every consecutive ready slot and writes one
// doorbell for the batch (coalescing). A thread leaves only once the tail has
// passed its ticket, so no command is ever left behind unpublished.
//
// Completion: one elected poller at a time (a try-lock in client memory) reads
// completions by phase tag, moves each into its command id's slot in client
// memory, and writes the CQ head doorbell once per batch. Waiters spin on
// their own slot, in client memory, and take a turn as poller when nobody
// is. Any thread may consume any completion, so a thread that left never
// blocks the queue.
//
// Command ids and their staging buffers come from a lock-free pool (Vyukov's
// bounded MPMC ring) and go back only after the completion was consumed and
// the data copied out. A waiter whose deadline passes abandons its command
// id; the poller returns it to the pool when its completion finally arrives,
// since the controller may still write into that staging buffer until then.
#pragma once
#include <cstdint>
#include <cstring>

#include "deepwell/common/config.hpp"
#include "deepwell/protocol/nvme.hpp"
#include "deepwell/protocol/queue_layout.hpp"
#include "deepwell/protocol/shared_atomic.hpp"
#include "deepwell/protocol/status.hpp"

namespace deepwell {

// Client-private counters, each on its own line. Lives in client memory
// (device memory for GPU clients, host memory for CPU clients).
struct alignas(128) qp_client_counters {
  alignas(128) uint32_t sq_ticket;  // next submission ticket
  alignas(128) uint32_t sq_tail;    // tickets published through the doorbell
  uint32_t sq_lock;
  alignas(128) uint32_t cq_lock;    // held by the elected poller
  uint32_t cq_head;                 // completions consumed (monotonic)
  uint32_t lost;                    // the poller saw the queue failed or stopped
  uint64_t state_checked_ns;        // when the poller last read the queue state
  alignas(128) uint32_t pool_head;  // command id pool: next to take
  alignas(128) uint32_t pool_tail;  // command id pool: next to return
};

struct pool_cell {
  uint32_t seq;
  uint32_t cid;
};

// One per command id: where the poller leaves the completion for its owner.
// Completion dwords 0-1 are not carried: none of deepwell's commands returns
// a command-specific result, and each would cost the GPU poller another read
// across the host link.
struct alignas(8) completion_slot {
  uint32_t state;  // completion_slot_state
  uint16_t status;
  uint16_t reserved;
};

enum completion_slot_state : uint32_t { slot_pending = 0, slot_done = 1, slot_abandoned = 2 };

// Client-memory geometry of one queue pair's client state: counters, ready
// marks (one per SQ slot), the pool ring and the completion slots.
struct client_state_layout {
  uint64_t ready_offset, pool_offset, slots_offset, total_bytes;
  uint32_t pool_capacity;  // a power of two >= depth
};

inline uint32_t next_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

inline client_state_layout compute_client_layout(const qp_geometry& g) {
  client_state_layout l{};
  l.pool_capacity = next_pow2(g.depth());
  l.ready_offset = align_up(sizeof(qp_client_counters), 128);
  l.pool_offset = align_up(l.ready_offset + uint64_t(g.sq_entries) * sizeof(uint32_t), 128);
  l.slots_offset = align_up(l.pool_offset + uint64_t(l.pool_capacity) * sizeof(pool_cell), 128);
  l.total_bytes = align_up(l.slots_offset + uint64_t(g.depth()) * sizeof(completion_slot), 128);
  return l;
}

// Fills a host buffer of l.total_bytes with the initial client state (all
// command ids in the pool). GPU clients copy it into device memory.
inline void init_client_state(void* mem, const qp_geometry& g, const client_state_layout& l) {
  std::memset(mem, 0, l.total_bytes);
  auto* base = static_cast<uint8_t*>(mem);
  auto* cells = reinterpret_cast<pool_cell*>(base + l.pool_offset);
  const uint32_t depth = g.depth();
  for (uint32_t i = 0; i < l.pool_capacity; ++i) {
    cells[i].seq = i < depth ? i + 1 : i;  // i < depth: holds cid i, ready to take at position i
    cells[i].cid = i;
  }
  auto* c = reinterpret_cast<qp_client_counters*>(base);
  c->pool_head = 0;
  c->pool_tail = depth;
}

// The result of waiting for one command.
struct wait_result {
  request_status status;
};

// A trivially copyable view of one queue pair for one client, passed by value
// to kernels (the cuCollections `ref` pattern). Pointers are in the client's
// address space: device-mapped pointers for a GPU client.
class queue_ref {
 public:
  // Shared with the controller.
  qp_header* header = nullptr;
  nvme::command* sq = nullptr;
  nvme::completion* cq = nullptr;
  uint8_t* staging = nullptr;
  // Client memory.
  qp_client_counters* counters = nullptr;
  uint32_t* ready = nullptr;
  pool_cell* pool = nullptr;
  completion_slot* slots = nullptr;
  // Geometry, from the client's own copy (not read back from shared memory).
  uint32_t sq_entries = 0;
  uint32_t cq_entries = 0;
  uint32_t depth = 0;
  uint32_t pool_capacity = 0;
  uint32_t slot_bytes = 0;

  // ---- command ids and staging buffers ----

  // The command id pool is a bounded ring of cells (Vyukov's MPMC queue):
  // the cell at position pos holds an id to take when its seq is pos + 1,
  // and is free for one returned when its seq is pos.
  DW_HD bool try_acquire_cid(uint16_t& cid) const {
    uint32_t pos = 0;
    pool_cell* cell = claim_pool_cell(counters->pool_head, 1, pos);
    if (!cell) return false;  // empty
    cid = uint16_t(cell->cid);
    client_atomic<uint32_t>(cell->seq).store(pos + pool_capacity, memory_order_release);
    return true;
  }

  // Spins (polling completions meanwhile, so that ids come back) until an id
  // is free, the deadline passes, or the queue stops.
  DW_HD request_status acquire_cid(uint16_t& cid, uint64_t deadline_ns) const {
    for (uint32_t i = 0;; ++i) {
      if (try_acquire_cid(cid)) return {};
      try_poll();
      if ((i & 63) == 63) {
        if (lost()) return request_status::client(client_code::controller_lost);
        if (now_ns() > deadline_ns) return request_status::client(client_code::timeout);
      }
      backoff(i);
    }
  }

  DW_HD void release_cid(uint16_t cid) const {
    uint32_t pos = 0;
    pool_cell* cell = nullptr;
    // No free cell would mean more ids returned than exist: cannot happen,
    // so the loop only retries what a race made it read.
    while (!(cell = claim_pool_cell(counters->pool_tail, 0, pos))) {
    }
    cell->cid = cid;
    client_atomic<uint32_t>(cell->seq).store(pos + 1, memory_order_release);
  }

  // Advances one end of the pool ring (`end`: its head to take an id, its
  // tail to return one) past the cell at its position once that cell's seq
  // is position + `ready`; returns that cell, its position in `pos`, or
  // nullptr when the cell at the end is not ready (the ring is empty or
  // full at that end).
  DW_HD pool_cell* claim_pool_cell(uint32_t& end, uint32_t ready, uint32_t& pos) const {
    const uint32_t mask = pool_capacity - 1;
    client_atomic<uint32_t> at(end);
    pos = at.load(memory_order_relaxed);
    for (;;) {
      pool_cell& cell = pool[pos & mask];
      const uint32_t seq = client_atomic<uint32_t>(cell.seq).load(memory_order_acquire);
      const int32_t dif = int32_t(seq - (pos + ready));
      if (dif == 0) {
        if (at.compare_exchange_weak(pos, pos + 1, memory_order_relaxed)) return &cell;
      } else if (dif < 0) {
        return nullptr;
      } else {
        pos = at.load(memory_order_relaxed);
      }
    }
  }

  DW_HD uint8_t* buffer(uint16_t cid) const { return staging + uint64_t(cid) * slot_bytes; }
  DW_HD uint64_t buffer_offset(uint16_t cid) const { return uint64_t(cid) * slot_bytes; }

  // ---- submission ----

  // Publishes `cmd` under `cid`. The caller filled every field but the cid;
  // data buffers are staging offsets (buffer_offset(cid)).
  DW_HD void submit(uint16_t cid, nvme::command cmd) const {
    cmd.cid = cid;  // its completion slot is already pending: consume and abandon leave it so
    const uint32_t mask = sq_entries - 1;
    const uint32_t t = client_atomic<uint32_t>(counters->sq_ticket).fetch_add(1, memory_order_relaxed);
    write_command(sq + (t & mask), cmd);
    // Release at system scope: the command reaches host memory before the
    // mark that lets any thread ring the doorbell for it.
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(ready[t & mask]).store(t + 1, memory_order_release);
    publish_until(t);
  }

  // ---- completion ----

  // One poller pass, if no other thread is polling. Returns completions moved.
  DW_HD uint32_t try_poll(uint32_t max = 0xFFFFFFFFu) const {
    client_atomic<uint32_t> lock(counters->cq_lock);
    uint32_t expected = 0;
    if (lock.load(memory_order_relaxed) != 0 || !lock.compare_exchange_strong(expected, 1, memory_order_acquire))
      return 0;
    const uint32_t n = poll_locked(max);
    lock.store(0, memory_order_release);
    return n;
  }

  // True once the completion for `cid` is in its slot.
  DW_HD bool is_done(uint16_t cid) const {
    return client_atomic<uint32_t>(slots[cid].state).load(memory_order_relaxed) == slot_done;
  }

  // Takes the completion out of `cid`'s slot if it is there.
  DW_HD bool try_consume(uint16_t cid, wait_result& out) const {
    // System scope: the staging data the controller wrote is read next, and
    // this SM's L1 may hold lines of an earlier use of the same buffer.
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system> state(slots[cid].state);
    if (state.load(memory_order_acquire) != slot_done) return false;
    out.status = request_status::from_nvme(nvme::status(slots[cid].status));
    state.store(slot_pending, memory_order_relaxed);  // ready for the id's next use
    return true;
  }

  // Waits for `cid`'s completion until the deadline. On timeout or a lost
  // controller the id is abandoned (the poller frees it if its completion
  // ever arrives): the caller must not touch or release it.
  DW_HD wait_result wait(uint16_t cid, uint64_t deadline_ns) const {
    wait_result r;
    for (uint32_t i = 0;; ++i) {
      if (wait_step(cid, deadline_ns, r, (i & 63) == 63)) return r;  // the clock is read every 64th pass
      backoff(i);
    }
  }

  // One step of wait(), for callers that poll several commands: true once
  // `r` holds cid's outcome (with the same rules: on timeout or a lost
  // controller the id is abandoned and must not be touched or released).
  DW_HD bool try_wait(uint16_t cid, uint64_t deadline_ns, wait_result& r) const {
    return wait_step(cid, deadline_ns, r, true);
  }

  // One step of waiting for cid for a caller that keeps the id whatever
  // happens (a write-back nobody waits for): true once `r` holds its
  // completion, or controller_lost when none will come. Never abandons.
  DW_HD bool try_wait_keep(uint16_t cid, wait_result& r) const {
    if (try_consume(cid, r)) return true;
    if (try_poll() != 0 && try_consume(cid, r)) return true;
    if (!lost()) return false;
    try_poll();  // completions posted before the stop still count
    if (try_consume(cid, r)) return true;
    r.status = request_status::client(client_code::controller_lost);
    return true;
  }

  // False once the controller failed this queue or stopped (a read across
  // the host link: spin loops use lost() instead).
  DW_HD bool running() const {
    return shared_load_relaxed(&header->state) == uint32_t(queue_state::running);
  }

  // True once the poller has seen the queue failed or stopped. Client
  // memory: thousands of waiting GPU threads must not each poll host memory.
  DW_HD bool lost() const { return client_atomic<uint32_t>(counters->lost).load(memory_order_relaxed) != 0; }

 private:
  // One pass of waiting for cid: consume, poll, and (when `check_end`)
  // abandon the id if the controller is lost or the deadline passed.
  DW_HD bool wait_step(uint16_t cid, uint64_t deadline_ns, wait_result& r, bool check_end) const {
    if (try_consume(cid, r)) return true;
    if (try_poll() != 0 && try_consume(cid, r)) return true;
    if (!check_end) return false;
    const bool gone = lost();
    if (!gone && now_ns() <= deadline_ns) return false;
    try_poll();  // completions posted before the stop still count
    if (try_consume(cid, r)) return true;
    if (abandon(cid)) {
      r.status = request_status::client(gone ? client_code::controller_lost : client_code::timeout);
      return true;
    }
    return try_consume(cid, r);  // it arrived while abandoning
  }

  DW_HD static void write_command(nvme::command* dst, const nvme::command& src) {
#if DW_DEVICE_CODE
    // Four 16-byte stores: one PCIe write burst for the whole entry.
    const uint4* s = reinterpret_cast<const uint4*>(&src);
    uint4* d = reinterpret_cast<uint4*>(dst);
#pragma unroll
    for (int i = 0; i < 4; ++i) d[i] = s[i];
#else
    std::memcpy(static_cast<void*>(dst), &src, sizeof(src));
#endif
  }

  // Returns once the doorbell covers ticket t, sweeping the tail if this
  // thread gets the lock.
  DW_HD void publish_until(uint32_t t) const {
    client_atomic<uint32_t> tail(counters->sq_tail);
    client_atomic<uint32_t> lock(counters->sq_lock);
    const uint32_t mask = sq_entries - 1;
    for (uint32_t i = 0;; ++i) {
      if (int32_t(tail.load(memory_order_acquire) - t) > 0) return;
      uint32_t expected = 0;
      if (lock.load(memory_order_relaxed) == 0 && lock.compare_exchange_strong(expected, 1, memory_order_acquire)) {
        const uint32_t start = tail.load(memory_order_relaxed);
        uint32_t end = start;
        while (cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(ready[end & mask]).load(memory_order_acquire) ==
               end + 1)
          ++end;
        if (end != start) {
          shared_store_release(&header->sq_tail_doorbell, end & mask);
          tail.store(end, memory_order_release);
        }
        lock.store(0, memory_order_release);
        continue;
      }
      backoff(i);
    }
  }

  // Reads completions in batches: the phase tags of up to `batch` entries
  // are loaded together (relaxed, so the reads cross the host link in
  // parallel), then one acquire fence orders what follows. The queue state
  // is read only when a pass finds nothing, and at most every 20 us.
  DW_HD uint32_t poll_locked(uint32_t max) const {
    constexpr uint32_t batch = 8;
    client_atomic<uint32_t> head_ref(counters->cq_head);
    uint32_t head = head_ref.load(memory_order_relaxed);
    const uint32_t mask = cq_entries - 1;
    const uint32_t log2n = 31 - log2_floor_clz(cq_entries);
    uint32_t n = 0;
    while (n < max) {
      uint32_t dw3[batch];
DW_UNROLL
      for (uint32_t k = 0; k < batch; ++k) dw3[k] = load_phase_word(&cq[(head + k) & mask].dw3);
      uint32_t ready_count = 0;
DW_UNROLL
      for (uint32_t k = 0; k < batch; ++k) {
        const uint32_t expected_phase = (((head + k) >> log2n) & 1) ^ 1;  // the controller's first pass writes 1
        if (ready_count == k && nvme::cqe_phase(dw3[k]) == expected_phase) ++ready_count;
      }
      if (ready_count == 0) break;
#if DW_DEVICE_CODE
      cuda::atomic_thread_fence(memory_order_acquire, cuda::thread_scope_system);
#endif
      for (uint32_t k = 0; k < ready_count; ++k) deliver(dw3[k]);
      head += ready_count;
      n += ready_count;
      if (ready_count < batch) break;
    }
    if (n != 0) {
      head_ref.store(head, memory_order_relaxed);
      shared_store_release(&header->cq_head_doorbell, head & mask);
    } else {
      check_state();
    }
    return n;
  }

  // On the GPU the batch's loads are relaxed, so they cross the link
  // together, and one fence follows. On the CPU an acquire load costs
  // nothing extra (x86) and is what ThreadSanitizer understands.
  DW_HD static uint32_t load_phase_word(const uint32_t* p) {
#if DW_DEVICE_CODE
    return shared_load_relaxed(p);
#else
    return shared_load_acquire(p);
#endif
  }

  DW_HD void deliver(uint32_t dw3) const {
    const uint16_t cid = nvme::cqe_cid(dw3);
    if (cid >= depth) return;  // the controller never does this; ignore rather than corrupt
    completion_slot& s = slots[cid];
    s.status = uint16_t(dw3 >> 17);
    uint32_t prev = slot_pending;
    client_atomic<uint32_t> state(s.state);
    if (!state.compare_exchange_strong(prev, slot_done, memory_order_release, memory_order_relaxed)) {
      if (prev == slot_abandoned) {  // its waiter gave up: the id is free only now
        state.store(slot_pending, memory_order_relaxed);
        release_cid(cid);
      }
    }
  }

  DW_HD void check_state() const {
    client_atomic<uint64_t> checked(counters->state_checked_ns);
    const uint64_t t = now_ns();
    if (t - checked.load(memory_order_relaxed) < 20000) return;
    checked.store(t, memory_order_relaxed);
    if (!running()) client_atomic<uint32_t>(counters->lost).store(1, memory_order_relaxed);
  }

  DW_HD bool abandon(uint16_t cid) const {
    uint32_t prev = slot_pending;
    return client_atomic<uint32_t>(slots[cid].state)
        .compare_exchange_strong(prev, slot_abandoned, memory_order_relaxed);
  }

  DW_HD static uint32_t log2_floor_clz(uint32_t v) {
#if DW_DEVICE_CODE
    return uint32_t(__clz(int(v)));
#else
    return uint32_t(__builtin_clz(v));
#endif
  }
};

// Builds a view over a queue pair's shared memory (`shared`, as mapped in the
// client's address space) and the client's state memory (`client`).
inline queue_ref make_queue_ref(void* shared, void* client, const qp_geometry& g) {
  const qp_layout sl = compute_layout(g);
  const client_state_layout cl = compute_client_layout(g);
  auto* s = static_cast<uint8_t*>(shared);
  auto* c = static_cast<uint8_t*>(client);
  queue_ref q;
  q.header = reinterpret_cast<qp_header*>(s);
  q.sq = reinterpret_cast<nvme::command*>(s + sl.sq_offset);
  q.cq = reinterpret_cast<nvme::completion*>(s + sl.cq_offset);
  q.staging = s + sl.staging_offset;
  q.counters = reinterpret_cast<qp_client_counters*>(c);
  q.ready = reinterpret_cast<uint32_t*>(c + cl.ready_offset);
  q.pool = reinterpret_cast<pool_cell*>(c + cl.pool_offset);
  q.slots = reinterpret_cast<completion_slot*>(c + cl.slots_offset);
  q.sq_entries = g.sq_entries;
  q.cq_entries = g.cq_entries;
  q.depth = g.depth();
  q.pool_capacity = cl.pool_capacity;
  q.slot_bytes = g.slot_bytes;
  return q;
}

}  // namespace deepwell
