// Sets of vectors on the host: DiskANN's .bin files (the layout its tools
// and ours share), a deterministic generator of clustered vectors, and the
// exact nearest neighbours (ground truth) by CPU threads.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepwell/vectors/format.hpp"

namespace deepwell::vectors {

// count x dim elements of `type`, row after row.
struct vector_set {
  const uint8_t* data = nullptr;
  uint64_t count = 0;
  uint32_t dim = 0;
  vector_type type = vector_type::f32;
  uint64_t row_bytes() const { return uint64_t(dim) * element_bytes(type); }
  const uint8_t* row(uint64_t i) const { return data + i * row_bytes(); }
};

// Row i as float32 (dim values to `out`).
void row_as_float(const vector_set& s, uint64_t i, float* out);
// Throws naming the first row with a NaN or an infinity (float types), or
// so long that distances between such rows overflow float32 (a squared
// length past max_squared_length: every distance came out infinite, every
// query the same answer).
void check_finite(const vector_set& s, const std::string& what);
// The same for `n` float32 rows of `dim` values (queries).
void check_finite_rows(const float* rows, uint64_t n, uint32_t dim, const std::string& what);
inline constexpr double max_squared_length = 3.4e38 / 4;  // (|a| + |b|)^2 <= 4 max |x|^2 within FLT_MAX

// A .bin file (uint32 count, uint32 dim, then the rows), mapped read-only.
// The element type is not in the file: the caller says it (or the name's
// .fbin / .hbin / .u8bin says it: type_from_name).
class vector_file {
 public:
  vector_file(const std::string& path, vector_type type);
  ~vector_file();
  vector_file(const vector_file&) = delete;
  vector_file& operator=(const vector_file&) = delete;
  const vector_set& set() const { return s_; }
  // Throws where the file was cut short (truncated) while mapped: the
  // vectors past its new end read as zeros since.
  void check_whole() const;

 private:
  std::string path_;
  void* map_ = nullptr;
  uint64_t bytes_ = 0;
  int guard_ = -1;  // against the file being cut short under the mapping
  vector_set s_;
};
// .fbin -> f32, .hbin -> f16, .u8bin / .bbin -> u8; throws for another name.
vector_type type_from_name(const std::string& path);
void write_vector_file(const std::string& path, const vector_set& s);

// Clustered vectors with the low intrinsic dimension of real embeddings:
// `clusters` centres, each with `latent` directions of its own; a vector is
// its centre plus Gaussian noise along its cluster's directions (scale
// `spread`) and a tenth of that in every dimension. (Isotropic noise alone,
// latent 0, makes every vector of a cluster nearly as far from a query as
// any other: neighbours mean little there, for any index.) All from `seed`:
// the same seed, count and shape give the same bytes on any machine.
// `stream` picks an independent set around the same centres (0: the base
// vectors, 1: queries). float32: centres N(0, 1) a dimension; uint8
// (SIFT-like): centres uniform in [32, 224), noise scaled by 40, rounded and
// clamped to [0, 255].
struct mixture_options {
  uint64_t count = 0;
  uint32_t dim = 128;
  uint32_t clusters = 64;
  vector_type type = vector_type::f32;
  float spread = 0.5f;
  uint32_t latent = 12;
  uint64_t seed = 1;
  uint32_t stream = 0;
};
// Rows [first, first + n) of the set (n x row bytes).
std::vector<uint8_t> generate_mixture(const mixture_options& o, uint64_t first, uint64_t n);

// The k nearest rows of `base` to each query (nq x dim float32), nearest
// first (the lower id first among equals), by double-precision distances;
// ids and distances are nq x k.
void exact_neighbours(const vector_set& base, const float* queries, uint64_t nq, uint32_t k, metric m, uint32_t* ids,
                      float* distances, unsigned threads = 0);

// recall@k: the share of each query's true k nearest that `found` holds
// (found and truth are nq x found_k and nq x truth_k, truth_k >= k).
double recall_at(uint32_t k, const uint32_t* found, uint32_t found_k, const uint32_t* truth, uint32_t truth_k,
                 uint64_t nq);

}  // namespace deepwell::vectors
