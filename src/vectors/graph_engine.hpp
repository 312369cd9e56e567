// The index build's heavy steps, behind one interface so that they run on
// CPU threads (graph_cpu.cpp) or on the GPU (build_gpu.cu) with the same
// result to the bit: both compare rows with row_l2 (distance.hpp), order
// candidates by (distance, id) and keep the same lists. build.cpp drives
// them; a GPU build therefore writes the file a CPU build writes.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "deepwell/vectors/build.hpp"
#include "deepwell/vectors/format.hpp"
#include "deepwell/vectors/search.hpp"

namespace deepwell::vectors {

// The vectors the graph is built on: n rows of `dim` floats.
struct float_rows {
  const float* x = nullptr;
  uint64_t n = 0;
  uint32_t dim = 0;
};

// A node's neighbours: ids only, at most the degree, no padding.
using adjacency = std::vector<std::vector<uint32_t>>;

struct candidate {
  float d;
  uint32_t id;
  bool operator<(const candidate& o) const { return d < o.d || (d == o.d && id < o.id); }
  bool operator==(const candidate& o) const { return id == o.id; }
};

// Candidates for node p nearest first, without p, unused slots or repeats.
inline std::vector<candidate> sorted_unique(uint64_t p, std::vector<candidate> c) {
  c.erase(std::remove_if(c.begin(), c.end(), [&](const candidate& x) { return x.id == p || x.id == no_neighbour; }),
          c.end());
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());  // equal ids have equal distances: adjacent
  return c;
}

// RobustPrune (DiskANN): from candidates sorted nearest first (unique,
// without p), keep a candidate unless a kept one is nearer to it, by alpha,
// than p is. dist(a, b): the distance between candidates a and b (ids).
template <class Dist>
std::vector<uint32_t> robust_prune(const std::vector<candidate>& c, uint32_t degree, float alpha, Dist&& dist) {
  std::vector<uint32_t> out;
  std::vector<char> gone(c.size(), 0);
  for (size_t i = 0; i < c.size() && out.size() < degree; ++i) {
    if (gone[i]) continue;
    out.push_back(c[i].id);
    for (size_t j = i + 1; j < c.size(); ++j)
      if (!gone[j] && alpha * dist(c[i].id, c[j].id) <= c[j].d) gone[j] = 1;
  }
  return out;
}

// The parameters every graph step shares.
struct graph_shape {
  uint32_t degree = 32;
  uint32_t list = 64;
  float alpha = 1.2f;
  unsigned threads = 0;
  // The GPU pass: expanded nodes a node's search may hold before the node is
  // redone on the CPU (0: 4 x list, at least 64). Small in tests, so that
  // the redo runs.
  uint32_t gpu_search_room = 0;
};

class graph_engine {
 public:
  virtual ~graph_engine() = default;
  // out[i * ways + w]: the index of the w-th nearest of the k centres (k x
  // dim floats) to point i (n points of `dim` floats, `stride` floats apart),
  // nearest first, the lower index among equals.
  virtual void nearest(const float* pts, uint64_t n, uint32_t dim, uint64_t stride, const float* centres, uint32_t k,
                       uint32_t ways, uint32_t* out) = 0;
  // The first graph before its reverse edges: node i's candidates are its
  // `per` nearest among the members of each group it belongs to
  // (near[i * ways + w] names them; members lists each group's nodes in
  // id order), pruned.
  virtual adjacency group_graph(const std::vector<uint32_t>& near, uint32_t ways,
                                const std::vector<std::vector<uint32_t>>& members, uint32_t per) = 0;
  // A Vamana pass without its reverse edges: each node's list pruned from
  // the nodes a greedy search for it expands on `adj`, from `entry`, and
  // its current neighbours.
  virtual adjacency pass(const adjacency& adj, uint64_t entry) = 0;
  // Each node's list grown by the nodes that point at it, pruned again
  // where it then holds more than the degree.
  virtual adjacency reverse(const adjacency& adj) = 0;
  // Nodes whose pass ran on CPU threads instead (the GPU's, where a
  // search outgrew its room), over all passes so far.
  virtual uint64_t redone_nodes() const { return 0; }
};

using engine_factory = std::function<std::unique_ptr<graph_engine>(float_rows, const graph_shape&)>;

std::unique_ptr<graph_engine> make_cpu_graph_engine(float_rows rows, const graph_shape& shape);

// The GPU engine (build_gpu.cu; builds with CUDA): the vectors and the
// graph in the current device's memory.
std::unique_ptr<graph_engine> make_gpu_graph_engine(float_rows rows, const graph_shape& shape);

// Node p's list in a pass (graph_engine::pass) on this thread: where a GPU
// pass's search outgrows its room.
std::vector<uint32_t> pass_node(float_rows rows, const graph_shape& shape, const adjacency& adj, uint64_t entry,
                                uint64_t p);

// build_index with the graph's steps on the engine `make` returns.
build_report build_index_with(const vector_set& data, metric m, const std::string& path, const build_options& o,
                              const engine_factory& make);

}  // namespace deepwell::vectors
