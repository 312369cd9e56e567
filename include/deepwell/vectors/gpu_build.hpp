// build_index (build.hpp) with the graph's heavy steps on the current GPU:
// nearest centres, the first graph, the Vamana passes and the reverse edges.
// Writes the same file, byte for byte, as build_index on CPU threads (both
// compute every distance in one order: distance.hpp's row_l2). A set larger
// than the GPU's memory holds at once (gpu_build_capacity) is built in
// shards of that size, unless build_options::shard_vectors says another.
// Defined in src/vectors/build_gpu.cu (builds with CUDA).
#pragma once
#include <string>

#include "deepwell/vectors/build.hpp"

namespace deepwell::vectors {

// The most vectors of `width` floats (dim, + 1 for the inner product) whose
// graph the GPU build holds at once in the current device's free memory.
uint64_t gpu_build_capacity(uint32_t width, uint32_t degree);

build_report build_index_on_gpu(const vector_set& data, metric m, const std::string& path, const build_options& o = {});

}  // namespace deepwell::vectors
