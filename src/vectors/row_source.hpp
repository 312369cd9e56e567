// The vectors as the graph steps see them: float rows, read from the
// caller's set (any element type) when a step needs them. For the inner
// product each row gains a coordinate sqrt(max|x|^2 - |x|^2): L2 between a
// query (with 0 there) and rows then orders them as the negated inner
// product does, so the graph's neighbours are the ones an inner-product
// search walks. An in-memory build holds every row (hold_all); a sharded
// build holds one shard's at a time (gather) and reads the rest in blocks.
#pragma once
#include <cstdint>
#include <vector>

#include "deepwell/vectors/data.hpp"

namespace deepwell::vectors {

class row_source {
 public:
  // One pass over the rows for the inner product's largest squared norm.
  row_source(const vector_set& s, metric m, unsigned threads);

  uint64_t count() const { return s_.count; }
  uint32_t width() const { return width_; }  // floats a row: dim, + 1 for the inner product

  // Every row converted, kept until the source goes (the in-memory build).
  void hold_all();
  const float* held() const { return held_.empty() ? nullptr : held_.data(); }

  // Rows [first, first + n): the held ones in place, or converted into
  // `scratch` on `threads` threads.
  const float* rows(uint64_t first, uint64_t n, std::vector<float>& scratch, unsigned threads = 1) const;
  // Row ids[i] into out[i * width()], i < n, on `threads` threads.
  void gather(const uint32_t* ids, uint64_t n, float* out, unsigned threads) const;
  void row(uint64_t i, float* out) const;

 private:
  const vector_set& s_;
  uint32_t dim_, width_;
  double most_ = 0;  // the inner product's largest squared norm
  unsigned threads_;
  std::vector<float> held_;
};

}  // namespace deepwell::vectors
