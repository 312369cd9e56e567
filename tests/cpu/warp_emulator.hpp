// A CPU warp emulator: one std::thread per active lane, and the warp
// collectives (match_any, ballot, shfl, sync) built on a barrier, so that
// the cache's coalescing path runs in CI, under ThreadSanitizer too. Each
// collective publishes the lane's value, meets the other lanes at the
// barrier, reads, and meets them again before the slots are reused.
#pragma once
#include <barrier>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

namespace deepwell::test {

class warp_group {
 public:
  warp_group(unsigned mask, uint32_t id) : mask_(mask), id_(id), bar_(__builtin_popcount(mask)) {}
  unsigned mask() const { return mask_; }
  uint32_t id() const { return id_; }

  template <class F>
  uint64_t exchange(unsigned lane, unsigned mask, uint64_t v, F&& combine) {
    if (mask != mask_) throw std::logic_error("emulated warp: a collective with a mask other than the warp's");
    vals_[lane] = v;
    bar_.arrive_and_wait();
    const uint64_t r = combine(vals_);
    bar_.arrive_and_wait();
    return r;
  }
  void sync() { bar_.arrive_and_wait(); }

 private:
  unsigned mask_;
  uint32_t id_;
  std::barrier<> bar_;
  uint64_t vals_[32] = {};
};

struct emulated_warp {
  warp_group* g;
  unsigned lane_;

  unsigned lane() const { return lane_; }
  unsigned active() const { return g->mask(); }
  unsigned match_any(unsigned mask, uint64_t key) const {
    return unsigned(g->exchange(lane_, mask, key, [&](const uint64_t* v) {
      unsigned r = 0;
      for (unsigned l = 0; l < 32; ++l)
        if ((mask >> l & 1) && v[l] == key) r |= 1u << l;
      return uint64_t(r);
    }));
  }
  unsigned ballot(unsigned mask, bool p) const {
    return unsigned(g->exchange(lane_, mask, p ? 1 : 0, [&](const uint64_t* v) {
      unsigned r = 0;
      for (unsigned l = 0; l < 32; ++l)
        if ((mask >> l & 1) && v[l]) r |= 1u << l;
      return uint64_t(r);
    }));
  }
  uint32_t shfl(unsigned mask, uint32_t v, unsigned src) const {
    return uint32_t(g->exchange(lane_, mask, v, [&](const uint64_t* vals) { return vals[src]; }));
  }
  void sync(unsigned mask) const {
    if (mask != g->mask()) throw std::logic_error("emulated warp: sync with a mask other than the warp's");
    g->sync();
  }
  uint32_t queue_hint() const { return g->id(); }
};

// Runs fn(emulated_warp) on one thread per lane of `mask`, as warp `id`.
template <class F>
void run_warp(unsigned mask, uint32_t id, F fn) {
  warp_group g(mask, id);
  std::vector<std::thread> lanes;
  for (unsigned l = 0; l < 32; ++l)
    if (mask >> l & 1) lanes.emplace_back([&g, l, &fn] { fn(emulated_warp{&g, l}); });
  for (auto& t : lanes) t.join();
}

}  // namespace deepwell::test
