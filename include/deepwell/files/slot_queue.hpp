// slot_queue_ref: the file API's free request slots, handed to waiting
// callers first come, first served (gfs_ref::call).
//
// Why a queue and not a sweep of lock words: a grep's 2,112 warps asked for
// slots in waves, and while all 256 were taken each waiting warp swept lock
// words, about 4,000 looks a slot taken. (The wait itself stayed: the slots
// are all taken because the file service is what the waves wait for; the
// queue makes the wait fair and quiet, not shorter.) Here a caller takes a ticket
// (one fetch_add) and waits on a cell of its own; whoever frees a slot puts
// it in the oldest waiter's cell. A bounded multi-producer multi-consumer
// queue after Vyukov's, with one addition: a waiter can leave at its
// deadline (a dead file service must not hang kernels), so a cell can be
// cancelled and a freeing caller then skips it.
//
// All of it lives in client memory (device memory for GPU clients, host
// memory for CPU ones) and is touched with client atomics only.
//
// A cell is one 64-bit word: lap << 32 | state << 30 | slot. Ticket t uses
// cell t % ncells in lap t / ncells. Lap L's consumer (a caller waiting for
// a slot) and producer (a caller freeing one) meet there: whichever comes
// second completes the hand-over; the consumer then opens the cell for lap
// L + 1. A consumer leaving at its deadline marks its cell cancelled; the
// producer that finds a cancelled (or already passed) cell takes another
// ticket. More waiters than cells make later laps wait for earlier ones on
// the same cell, which stays first come, first served.
//
// Slots whose caller gave up waiting for the reply (abandoned) are not
// free: the service may still write them. They are marked in `abandoned`
// and put back by whoever next finds them answered (reclaim()), which every
// waiting consumer tries now and then; so are slots a producer could not
// place by its deadline.
#pragma once
#include <cstdint>

#include "deepwell/common/config.hpp"
#include "deepwell/protocol/gfs_layout.hpp"
#include "deepwell/protocol/shared_atomic.hpp"

namespace deepwell {

class client_memory;

struct slot_queue_ref {
  unsigned long long* head = nullptr;   // consumers' next ticket
  unsigned long long* tail = nullptr;   // producers' next ticket
  unsigned long long* cells = nullptr;  // ncells words (see above)
  uint32_t ncells = 0;                  // a power of two, at least nslots
  uint32_t cell_shift = 0;              // log2(ncells)
  uint32_t* abandoned = nullptr;        // per slot: slot_queue_ref::abandoned_* below
  uint32_t* abandoned_count = nullptr;  // slots marked in `abandoned`
  uint32_t nslots = 0;

  static constexpr uint32_t empty = 0, full = 1, cancelled = 2;
  // abandoned[s]: 0 (in use or queued), waiting_reply (its caller timed out;
  // free once the service answers), loose (free, not queued: a producer
  // could not place it by its deadline).
  static constexpr uint32_t waiting_reply = 1, loose = 2;

  DW_HD static constexpr unsigned long long cell(uint32_t lap, uint32_t state, uint32_t slot) {
    return (static_cast<unsigned long long>(lap) << 32) | (static_cast<unsigned long long>(state) << 30) | slot;
  }
  DW_HD static constexpr uint32_t lap_of(unsigned long long c) { return uint32_t(c >> 32); }
  DW_HD static constexpr uint32_t state_of(unsigned long long c) { return uint32_t(c >> 30) & 3u; }
  DW_HD static constexpr uint32_t slot_of(unsigned long long c) { return uint32_t(c) & ((1u << 30) - 1); }
  // a is a later lap than b (laps wrap at 2^32).
  DW_HD static constexpr bool after(uint32_t a, uint32_t b) { return int32_t(a - b) > 0; }

  // What the host writes into zeroed client memory before first use: every
  // slot free, queued in cells 0 .. nslots - 1 of lap 0; tail = nslots.
  // (Zero is lap 0, empty, for the other cells.)
  static unsigned long long initial_cell(uint32_t i) { return cell(0, full, i); }

  // The outcome of take(): a slot, or none by the deadline. `polls` counts
  // the looks at the cell while waiting.
  struct taken {
    uint32_t slot = ~0u;
    uint32_t polls = 0;
    bool waited = false;  // no slot was free at once
    DW_HD bool ok() const { return slot != ~0u; }
  };

  // Taking a slot in steps, for callers that wait in a loop of their own
  // (a warp keeps its lanes together by deciding each round in all of
  // them: gfs_ref::call): enter() takes the ticket, then poll() looks at
  // its cell once.
  DW_HD unsigned long long enter() const {
    return client_atomic<unsigned long long>(*head).fetch_add(1, memory_order_relaxed);
  }
  // 1: slot `s` is the caller's; -1: it left the queue (past `deadline`,
  // no slot came); 0: not yet.
  DW_HD int poll(unsigned long long t, uint64_t deadline, uint32_t& s) const {
    const uint32_t lap = uint32_t(t >> cell_shift);
    client_atomic<unsigned long long> c(cells[t & (ncells - 1)]);
    unsigned long long v = c.load(memory_order_acquire);
    if (lap_of(v) == lap && state_of(v) == full) {
      // Only this consumer writes the cell now: open it for the next lap.
      c.store(cell(lap + 1, empty, 0), memory_order_relaxed);
      s = slot_of(v);
      return 1;
    }
    if (now_ns() <= deadline) return 0;
    // Leave, if no slot came meanwhile and no earlier waiter holds the
    // cell. A cell of the lap before, cancelled, is passed over for its
    // producer too (which then finds a later lap and moves on). Otherwise
    // a slot just came, or an earlier waiter of this cell is about to take
    // or leave it: look again.
    const bool mine_empty = lap_of(v) == lap && state_of(v) == empty;
    const bool before_cancelled = lap_of(v) == lap - 1 && state_of(v) == cancelled;
    if ((mine_empty || before_cancelled) && c.compare_exchange_strong(v, cell(lap, cancelled, 0), memory_order_acq_rel))
      return -1;
    return 0;
  }

  // Waits for a free slot, first come, first served, until `deadline`
  // (now_ns()). `answered(s)` says whether slot s's last request has its
  // reply (reclaim() needs it); waiters reclaim now and then.
  template <class Answered>
  DW_HD taken take(uint64_t deadline, const Answered& answered) const {
    taken r;
    const unsigned long long t = enter();
    for (uint32_t i = 0;; ++i) {
      uint32_t s = 0;
      const int got = poll(t, deadline, s);
      if (got) {
        if (got > 0) r.slot = s;
        r.polls = i;
        r.waited = i > 0 || got < 0;
        return r;
      }
      if ((i & 63) == 63) reclaim(deadline, answered);
      backoff(i);
    }
  }

  // Frees slot s: to the oldest waiter, else into the queue. A producer
  // waits only for an earlier lap's consumer of its cell, which is about
  // to take or leave; past `deadline` the slot is left loose for reclaim().
  DW_HD void put(uint32_t s, uint64_t deadline) const {
    for (;;) {
      const unsigned long long t = client_atomic<unsigned long long>(*tail).fetch_add(1, memory_order_relaxed);
      const uint32_t lap = uint32_t(t >> cell_shift);
      client_atomic<unsigned long long> c(cells[t & (ncells - 1)]);
      for (uint32_t i = 0;; ++i) {
        unsigned long long v = c.load(memory_order_acquire);
        const uint32_t l = lap_of(v), st = state_of(v);
        if (l == lap && st == empty) {
          if (c.compare_exchange_strong(v, cell(lap, full, s), memory_order_acq_rel)) return;
          continue;  // its waiter left meanwhile
        }
        if (l == lap && st == cancelled) {
          // Its waiter left: open the cell for the next lap, try a new ticket.
          if (!c.compare_exchange_strong(v, cell(lap + 1, empty, 0), memory_order_acq_rel)) continue;
          break;
        }
        if (after(l, lap)) break;  // passed over by a later waiter: a new ticket
        // An earlier lap's consumer has not taken or left the cell yet.
        if (now_ns() > deadline) {
          mark(s, loose);
          return;
        }
        backoff(i);
      }
    }
  }

  // Slot s's caller stops waiting for its reply (a timeout): the slot is
  // put back once the reply has come.
  DW_HD void abandon(uint32_t s) const { mark(s, waiting_reply); }

  // Puts back the abandoned slots that are free again. Cheap when there are
  // none (one load).
  template <class Answered>
  DW_HD void reclaim(uint64_t deadline, const Answered& answered) const {
    if (client_atomic<uint32_t>(*abandoned_count).load(memory_order_acquire) == 0) return;
    for (uint32_t s = 0; s < nslots; ++s) {
      client_atomic<uint32_t> a(abandoned[s]);
      uint32_t v = a.load(memory_order_acquire);
      if (v == 0 || (v == waiting_reply && !answered(s))) continue;
      if (!a.compare_exchange_strong(v, 0, memory_order_acq_rel)) continue;
      client_atomic<uint32_t>(*abandoned_count).fetch_sub(1, memory_order_relaxed);
      put(s, deadline);
    }
  }

 private:
  DW_HD void mark(uint32_t s, uint32_t how) const {
    client_atomic<uint32_t>(*abandoned_count).fetch_add(1, memory_order_relaxed);
    client_atomic<uint32_t>(abandoned[s]).store(how, memory_order_release);
  }
};

// A queue of nslots free slots (0 .. nslots - 1) in `mem`, which keeps it,
// with 2^cell_shift cells (0: at least 16384 and 4 * nslots; tests pass
// small ones to make waiters lap). Throws deepwell::error when nslots is 0
// or above 2^20, or the cells are fewer than the slots.
slot_queue_ref make_slot_queue(client_memory& mem, uint32_t nslots, uint32_t cell_shift = 0);

}  // namespace deepwell
