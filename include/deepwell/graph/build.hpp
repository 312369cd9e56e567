// Making graphs: generators (Kronecker / R-MAT with the Graph500 parameters,
// uniform random), converters (SNAP-style edge lists, Matrix Market) and
// symmetrize. All are deterministic: the same inputs and seed give the same
// bytes whatever the thread count (each generated edge comes from a
// counter-based hash of its index; lists are sorted before they are written).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "deepwell/graph/csr_file.hpp"

namespace deepwell::graph {

struct generator_options {
  enum class kind_t { kron, uniform } kind = kind_t::kron;
  unsigned scale = 16;    // 2^scale nodes
  unsigned degree = 16;   // generated edges per node (Graph500's edge factor)
  uint64_t seed = 1;
  bool symmetric = true;  // store both directions (an undirected graph)
  bool weighted = false;  // uint32 weights 1..255, a hash of the (unordered) edge and the seed
  uint32_t id_bytes = 4;  // 4 or 8
  unsigned threads = 0;   // 0: all cores
  double a = 0.57, b = 0.19, c = 0.19;  // R-MAT quadrant probabilities (Graph500); d = 1 - a - b - c
};

// Throws deepwell::error on bad options (scale 0 or > 40, probabilities that do not sum below 1, ...).
csr_graph generate(const generator_options& o, progress* p = nullptr);

// An edge list as read from a text file.
struct edge_list {
  uint64_t nodes = 0;           // max id + 1 (or the Matrix Market size)
  std::vector<uint64_t> src, dst;
  std::vector<uint32_t> w;      // raw weights when weights != none
  weight_type weights = weight_type::none;
  bool symmetric_input = false; // Matrix Market "symmetric": each line stands for both directions
  std::string origin;
};

enum class text_format { automatic, snap, matrix_market };

// SNAP-style: one "src dst [weight]" per line, '#' or '%' comments, any
// whitespace. Matrix Market: coordinate format, 1-based, pattern / integer /
// real, general or symmetric. Weights: uint32 when every weight is a
// non-negative integer below 2^32, float32 otherwise. Errors name the file,
// the line and what is wrong with it.
edge_list read_edge_list(const std::string& path, text_format f = text_format::automatic, progress* p = nullptr);

struct build_options {
  bool symmetrize = false;  // add v->u for every u->v
  bool keep_self_loops = false;
  uint32_t id_bytes = 0;    // 0: 4 when the ids fit, else 8
  unsigned threads = 0;
};

// CSR with sorted lists and duplicates removed (of duplicate edges the one
// with the smallest weight bits is kept: the smallest weight when weights
// are non-negative).
csr_graph build_csr(const edge_list& e, const build_options& o, progress* p = nullptr);

// The undirected version of g (both directions of every edge).
csr_graph symmetrize(const csr_graph& g, unsigned threads = 0, progress* p = nullptr);

// The weight a generated graph gives edge {u, v} (symmetric in u and v).
uint32_t generated_weight(uint64_t u, uint64_t v, uint64_t seed);

}  // namespace deepwell::graph
