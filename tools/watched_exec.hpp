// The CPU executor of the graph algorithms, counting as it goes: the
// algorithms' iterations (BFS levels, SSSP rounds, PageRank iterations) and
// the edges looked at, for the progress line of a long --cpu run
// (ticker.hpp). Counting is one relaxed atomic add per step: nothing next
// to a step's pass over the graph.
#pragma once
#include <atomic>
#include <string>
#include <type_traits>

#include "deepwell/graph/cpu_exec.hpp"
#include "deepwell/graph/steps.hpp"

namespace deepwell::tools {

class watched_cpu_exec : public graph::cpu_exec {
 public:
  using graph::cpu_exec::cpu_exec;

  // Hides cpu_exec::run: the algorithms are templates over the executor
  // and call x.run, which is this one.
  template <class G, class Step>
  uint64_t run(const G& g, const Step& step, uint64_t n) {
    const uint64_t looked = graph::cpu_exec::run(g, step, n);
    edges_.fetch_add(looked, std::memory_order_relaxed);
    // One step of each kind ends an iteration of its algorithm.
    if constexpr (std::is_same_v<Step, graph::bfs_step> || std::is_same_v<Step, graph::sssp_step> ||
                  std::is_same_v<Step, graph::pr_update_step>)
      iterations_.fetch_add(1, std::memory_order_relaxed);
    return looked;
  }

  // "level 5, 12.3 M edges looked" (the words of the algorithm's iterations).
  std::string status(const std::string& algo, unsigned pagerank_iterations) const {
    const uint64_t it = iterations_.load(std::memory_order_relaxed);
    const double edges = double(edges_.load(std::memory_order_relaxed));
    char b[120];
    if (algo == "bfs")
      std::snprintf(b, sizeof b, "%llu levels done", (unsigned long long)it);
    else if (algo == "sssp")
      std::snprintf(b, sizeof b, "%llu rounds done", (unsigned long long)it);
    else if (algo == "pagerank")
      std::snprintf(b, sizeof b, "iteration %llu of %u done", (unsigned long long)it, pagerank_iterations);
    else
      b[0] = 0;
    std::string s = b;
    std::snprintf(b, sizeof b, "%s%.1f M edges looked at", s.empty() ? "" : ", ", edges / 1e6);
    return s + b;
  }

  void reset_progress() {
    iterations_ = 0;
    edges_ = 0;
  }

 private:
  std::atomic<uint64_t> iterations_{0}, edges_{0};
};

}  // namespace deepwell::tools
