// The graph of a set too large to build in memory at once (DiskANN's
// sharded build): k-means on a sample splits the rows into overlapping
// shards (each row in the shards of its two nearest centres, an oversized
// shard cut into pieces), each shard's graph is built in memory on the
// engine like a whole set's (first graph, passes, from the shard's own
// medoid), and merged into the whole graph: a row's lists from its two
// shards, united and pruned again by exact distance. Only one shard's rows
// and its engine's working memory are held at a time; the whole graph,
// the codes and the shard lists stay on the host. Every step depends on the
// data and the options only: the same file on CPU threads as on the GPU.
#pragma once
#include <cstdint>
#include <vector>

#include "vectors/graph_engine.hpp"
#include "vectors/row_source.hpp"

namespace deepwell::vectors {

class sharded_graph {
 public:
  // `sample_engine` assigns rows to shards (any engine: only its nearest()
  // is used); `most` rows a shard at most.
  sharded_graph(const row_source& rows, const build_options& o, const engine_factory& make,
                graph_engine& sample_engine, uint64_t most);

  uint32_t shards() const { return uint32_t(shards_.size()); }
  // Shard s's graph built and merged into `adj` (every row's list, global
  // ids; rows of shards not yet merged have none).
  void merge_shard(uint32_t s, adjacency& adj);
  uint64_t redone_nodes() const { return redone_; }

 private:
  const row_source& rows_;
  build_options o_;
  engine_factory make_;
  std::vector<std::vector<uint32_t>> shards_;  // each shard's rows, in id order
  uint64_t redone_ = 0;
};

// The shape the graph steps take from the build's options.
graph_shape shape_of(const build_options& o);

}  // namespace deepwell::vectors
