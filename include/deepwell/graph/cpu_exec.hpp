// The CPU executor for algorithms.hpp: state in host memory, steps run by
// CPU threads, each thread a warp of one lane. With a cached_graph over a
// host page cache this drives the same algorithm code through deepwell with
// CPU clients (the tests do).
#pragma once
#include <atomic>
#include <cstdint>
#include <numeric>
#include <vector>

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

  template <class G, class Step>
  uint64_t run(const G& g, const Step& s, uint64_t n) {
    std::atomic<uint64_t> looked{0};
    detail::parallel_for(n, threads_, [&](unsigned, uint64_t b, uint64_t e) {
      uint64_t mine = 0;
      for (uint64_t v = b; v < e; ++v) mine += s(one_lane{}, g, v);
      looked += mine;
    });
    return looked;
  }

 private:
  unsigned threads_;
  step_counters c_{};
};

}  // namespace deepwell::graph
