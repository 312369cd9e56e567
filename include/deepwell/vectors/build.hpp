// Builds a .dwv index (format.hpp) from vectors in host memory, on CPU
// threads: a product quantiser (k-means a subspace on an evenly spaced
// sample), a first graph from each vector's nearest neighbours among those
// sharing one of its two nearest coarse clusters, pruned to `degree`
// diverse neighbours (DiskANN's RobustPrune with `alpha`) with reverse edges
// added, then `passes` Vamana passes: each vector's list rebuilt from a
// greedy search for it on the previous pass's graph; for a set larger than
// `shard_vectors`, that graph a shard at a time, the shards merged. Every step depends on
// the data and the options only (never on thread timing): the same input
// gives the same file. The records are laid out by `layout`; a search
// answers with the rows' numbers (the index's labels) either way.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "deepwell/vectors/data.hpp"

namespace deepwell::vectors {

// How records are laid out in the file (format.hpp).
enum class record_layout : uint32_t {
  neighbourhoods = 0,  // a page a node and its graph neighbours (fewer page reads a search)
  by_row = 1,          // the rows' order
};

constexpr uint64_t min_shard_vectors = 1024;
constexpr uint32_t max_build_passes = 64;  // build_options::passes: more only repeats the work

struct build_options {
  uint32_t degree = 32;        // neighbours a node at most (R)
  uint32_t list = 64;          // the passes' search list (L)
  float alpha = 1.2f;          // RobustPrune's
  uint32_t passes = 2;         // Vamana passes after the first graph
  uint32_t pq_subspaces = 0;   // 0: dim / 4 (dim / 2 for the inner product) where it divides, at most 64
  uint32_t page_bytes = 0;     // 0: the smallest power of two >= 4096 that holds a record
  record_layout layout = record_layout::neighbourhoods;
  uint64_t seed = 1;           // recorded (the build itself is deterministic)
  unsigned threads = 0;        // 0: every core
  bool progress = false;       // phases on stderr
  // Out of core: the most vectors whose graph is built in memory at once.
  // A larger set is built in overlapping shards of at most this many,
  // merged (DiskANN's sharded build): only a shard's rows (as floats) and
  // its graph's working memory are held at a time, beside the whole graph
  // (4 x degree bytes a vector) and the codes. 0: the whole set at once on
  // CPU threads; on the GPU (build_index_on_gpu), shards sized to its free
  // memory where the set does not fit. At least min_shard_vectors.
  uint64_t shard_vectors = 0;
  // Each phase's result kept beside the index (INDEX.build, removed once
  // the index is written), and a build that finds one of the same input and
  // options resumes after its last finished phase.
  bool resume = true;
  // Asked after each phase (its result kept); false stops the build there
  // with an error saying so: building again resumes it.
  std::function<bool()> keep_going;
};

struct build_report {
  uint64_t vectors = 0, edges = 0;
  uint32_t pq_subspaces = 0;
  uint32_t shards = 0;          // 0: the graph built in memory at once
  // Phases a kept state had done: 1 the quantiser; then in memory 2 the
  // first graph, 2 + i pass i; sharded, 1 + s the first s shards.
  uint32_t resumed_phases = 0;
  double quantiser_seconds = 0, graph_seconds = 0, write_seconds = 0;
  // Parts of those: the first graph's and the passes' steps (graph), the
  // records' order (write), and saving the states a resume starts from
  // (after each phase, inside the phase's time).
  double first_graph_seconds = 0, passes_seconds = 0, layout_seconds = 0, state_seconds = 0;
  uint64_t redone_nodes = 0;  // GPU passes: nodes whose search outgrew its room, redone on CPU threads
};

// Builds the index of `data` for metric `m` into `path` (written to
// path + ".part", synced, then renamed: no half-written index under the
// name; build_options::resume says where an interrupted build resumes).
// Throws naming the problem: bad options, a NaN or infinite value, a write
// that fails (disk full), a stop asked by keep_going.
build_report build_index(const vector_set& data, metric m, const std::string& path, const build_options& o = {});

// The subspaces the library picks for `dim` and `m` (build_options::pq_subspaces 0).
uint32_t default_pq_subspaces(uint32_t dim, metric m = metric::l2);

}  // namespace deepwell::vectors
