#include "vectors/row_source.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "deepwell/common/detail/parallel.hpp"

namespace deepwell::vectors {

namespace {

double squared_norm(const float* r, uint32_t dim) {
  double t = 0;
  for (uint32_t d = 0; d < dim; ++d) t += double(r[d]) * double(r[d]);
  return t;
}

}  // namespace

row_source::row_source(const vector_set& s, metric m, unsigned threads)
    : s_(s), dim_(s.dim), width_(s.dim + (m == metric::inner_product ? 1 : 0)), threads_(threads) {
  if (width_ == dim_) return;
  std::vector<double> most(detail::thread_count(threads), 0.0);
  detail::parallel_for(s_.count, threads, [&](unsigned t, uint64_t b, uint64_t e) {
    std::vector<float> r(dim_);
    for (uint64_t i = b; i < e; ++i) {
      row_as_float(s_, i, r.data());
      most[t] = std::max(most[t], squared_norm(r.data(), dim_));
    }
  });
  most_ = *std::max_element(most.begin(), most.end());
}

void row_source::row(uint64_t i, float* out) const {
  row_as_float(s_, i, out);
  if (width_ > dim_) out[dim_] = float(std::sqrt(std::max(0.0, most_ - squared_norm(out, dim_))));
}

void row_source::hold_all() {
  held_.resize(s_.count * width_);
  detail::parallel_for(s_.count, threads_, [&](unsigned, uint64_t b, uint64_t e) {
    for (uint64_t i = b; i < e; ++i) row(i, &held_[i * width_]);
  });
}

const float* row_source::rows(uint64_t first, uint64_t n, std::vector<float>& scratch, unsigned threads) const {
  if (!held_.empty()) return &held_[first * width_];
  scratch.resize(n * width_);
  detail::parallel_for(n, threads, [&](unsigned, uint64_t b, uint64_t e) {
    for (uint64_t i = b; i < e; ++i) row(first + i, &scratch[i * width_]);
  });
  return scratch.data();
}

void row_source::gather(const uint32_t* ids, uint64_t n, float* out, unsigned threads) const {
  detail::parallel_for(n, threads, [&](unsigned, uint64_t b, uint64_t e) {
    for (uint64_t i = b; i < e; ++i) {
      if (!held_.empty()) {
        std::memcpy(out + i * width_, &held_[uint64_t(ids[i]) * width_], 4ull * width_);
      } else {
        row(ids[i], out + i * width_);
      }
    }
  });
}

}  // namespace deepwell::vectors
