// The CPU executor for algorithms.hpp: state in host memory, steps run by
// CPU threads, each thread a warp of one lane. With a cached_graph over a
// host page cache this drives the same algorithm code through deepwell with
// CPU clients (the tests do).
#pragma once
#include <atomic>
#include <cstdint>
#include <numeric>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/graph/parallel.hpp"
#include "deepwell/graph/steps.hpp"

namespace deepwell::graph {

class cpu_exec {
 public:
  explicit cpu_exec(unsigned threads = 0) : threads_(threads) {}

  template <class T>
  struct buffer {
    std::vector<T> v;
    T* data() { return v.data(); }
  };
  template <class T>
  buffer<T> alloc(uint64_t n) {
    return buffer<T>{std::vector<T>(n)};
  }
  template <class T>
  void fill(T* p, uint64_t n, T v) {
    std::fill(p, p + n, v);
  }
  void iota(uint32_t* p, uint64_t n) { std::iota(p, p + n, 0u); }
  template <class T>
  void set(T* p, T v) {
    *p = v;
  }
  template <class T>
  std::vector<T> download(const T* p, uint64_t n) {
    return std::vector<T>(p, p + n);
  }
  step_counters* counters() { return &c_; }
  void reset_counters() { c_ = step_counters{}; }
  step_counters read_counters() const { return c_; }

  // As gpu_exec's: lists longer than `threshold` entries are shared by the
  // threads in chunks of `chunk` (steps.hpp: long lists; 0: a quarter of
  // the threshold, at most 2048); threshold 0 turns that off; `capacity`
  // lists at most are queued a step (the rest are walked by their thread).
  void set_long_lists(uint64_t threshold, uint32_t chunk = 0, uint32_t capacity = 1u << 16) {
    if (!chunk) chunk = long_list_queue::default_chunk(threshold);
    if (threshold && (chunk > threshold || capacity == 0))
      throw error("long lists: the chunk must not be longer than the threshold, the capacity at least 1");
    threshold_ = threshold;
    chunk_ = chunk;
    queue_.assign(capacity, long_list{});
  }

  template <class G, class Step>
  uint64_t run(const G& g, const Step& step, uint64_t n) {
    Step s = step;
    unsigned long long head = 0;
    if constexpr (splits_long_lists<Step>) {
      if (threshold_) s.lists = long_list_queue{queue_.data(), &head, uint32_t(queue_.size()), chunk_, threshold_};
    }
    uint64_t looked = each(g, s, n);
    if constexpr (splits_long_lists<Step>) {
      const long_list_step<Step> ls = long_list_step<Step>::after(s, s.lists, head);
      if (ls.count) looked += each(g, ls, ls.chunks);  // one lane: one id a chunk
    }
    return looked;
  }

 private:
  template <class G, class Step>
  uint64_t each(const G& g, const Step& s, uint64_t n) {
    std::atomic<uint64_t> looked{0};
    detail::parallel_for(n, threads_, [&](unsigned, uint64_t b, uint64_t e) {
      uint64_t mine = 0;
      for (uint64_t v = b; v < e; ++v) mine += s(one_lane{}, g, v);
      looked += mine;
    });
    return looked;
  }

  unsigned threads_;
  uint64_t threshold_ = 8192;
  uint32_t chunk_ = 2048;
  std::vector<long_list> queue_ = std::vector<long_list>(1u << 16);
  step_counters c_{};
};

}  // namespace deepwell::graph
