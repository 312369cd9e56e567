// State a target keeps for each poller's io engine that calls it, found
// without a lock: a fixed table of slots, each claimed by the first call
// from an engine (by its address) and kept for the target's life. A target
// is called on each engine from that engine's own thread, so a claimed
// slot's state has one user.
#pragma once
#include <atomic>

#include "deepwell/targets/io_engine.hpp"

namespace deepwell::detail {

template <class T, unsigned N = 64>
class per_engine_slots {
 public:
  // `io`'s slot; on the call that claims it, init(slot) runs first.
  // nullptr when all N slots belong to other engines.
  template <class Init>
  T* of(io_engine& io, Init&& init) {
    for (unsigned i = 0; i < N; ++i) {
      io_engine* e = ids_[i].load(std::memory_order_acquire);
      if (e == &io) return &slots_[i];
      if (e == nullptr && ids_[i].compare_exchange_strong(e, &io, std::memory_order_acq_rel)) {
        init(slots_[i]);
        return &slots_[i];
      }
      if (e == &io) return &slots_[i];
    }
    return nullptr;
  }
  T* begin() { return slots_; }
  T* end() { return slots_ + N; }
  const T* begin() const { return slots_; }
  const T* end() const { return slots_ + N; }

 private:
  std::atomic<io_engine*> ids_[N] = {};
  T slots_[N];
};

}  // namespace deepwell::detail
