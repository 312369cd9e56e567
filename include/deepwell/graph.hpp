// Graphs in one include: the CSR file format and its builders, a graph's
// arrays through the page cache, and the algorithms (BFS, CC, PageRank, ...)
// written once for CPU and GPU executors. docs/graphs.md.
#pragma once

#include "deepwell/graph/algorithms.hpp"
#include "deepwell/graph/build.hpp"
#include "deepwell/graph/csr_file.hpp"
#include "deepwell/graph/graph_arrays.hpp"
