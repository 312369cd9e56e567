// A proximity graph over rows held in memory, on a graph engine: the whole
// set in an in-memory build, one shard at a time in a sharded one
// (shards.hpp). build.hpp tells the steps; the engine does their heavy work.
#pragma once
#include <cstdint>
#include <vector>

#include "vectors/graph_engine.hpp"
#include "vectors/row_source.hpp"

namespace deepwell::vectors {

// Lloyd's k-means of `n` points of `dim` floats (rows `stride` apart) into
// k centres, started from evenly spaced points; empty clusters keep their
// centre. The assignments on the engine; the means on this thread, in point order.
std::vector<float> kmeans(graph_engine& e, const float* pts, uint64_t n, uint32_t dim, uint64_t stride, uint32_t k,
                          unsigned iters);

// `count` rows spread evenly over the source (row s * n / count), converted.
std::vector<float> evenly_spaced(const row_source& rows, uint64_t count);

// The row nearest the mean (the lowest among equals): summed in fixed
// blocks of rows, the blocks' sums added in order, so the same bits
// whatever the thread count and whether the rows are held or read.
uint64_t medoid(const row_source& rows, unsigned threads);
uint64_t medoid(float_rows rows, unsigned threads);

// The first graph: each row's nearest among the members of its two nearest
// coarse clusters, pruned, with reverse edges.
adjacency first_graph(graph_engine& e, float_rows rows, const build_options& o);

// A Vamana pass: each row's list from a greedy search for it on the graph
// as it was before the pass (the order of work does not matter), with
// reverse edges.
adjacency vamana_pass(graph_engine& e, const adjacency& adj, uint64_t entry, bool progress);

}  // namespace deepwell::vectors
