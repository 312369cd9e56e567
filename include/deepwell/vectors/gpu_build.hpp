// build_index (build.hpp) with the graph's heavy steps on the current GPU:
// nearest centres, the first graph, the Vamana passes and the reverse edges.
// Writes the same file, byte for byte, as build_index on CPU threads (both
// compute every distance in one order: distance.hpp's row_l2); the vectors
// (as float rows) must fit in the GPU's memory beside the graph. Defined in
// src/vectors/build_gpu.cu (builds with CUDA).
#pragma once
#include <string>

#include "deepwell/vectors/build.hpp"

namespace deepwell::vectors {

build_report build_index_on_gpu(const vector_set& data, metric m, const std::string& path, const build_options& o = {});

}  // namespace deepwell::vectors
