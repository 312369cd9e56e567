#include "deepwell/vectors/data.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/file_io.hpp"
#include "common/mapping_guard.hpp"
#include "common/unique_fd.hpp"
#include "deepwell/common/detail/hash.hpp"
#include "deepwell/common/detail/parallel.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/vectors/distance.hpp"

namespace deepwell::vectors {

void row_as_float(const vector_set& s, uint64_t i, float* out) {
  const uint8_t* r = s.row(i);
  if (s.type == vector_type::f32) {
    std::memcpy(out, r, 4ull * s.dim);
    return;
  }
  for (uint32_t d = 0; d < s.dim; ++d) out[d] = element(r, d, s.type);
}

namespace {

void check_row(const float* row, uint32_t dim, uint64_t i, const std::string& what, const char* noun) {
  double length = 0;
  for (uint32_t d = 0; d < dim; ++d) {
    if (!std::isfinite(row[d]))
      throw error(what + ": " + noun + " " + std::to_string(i) + " holds a NaN or an infinity (dimension " +
                  std::to_string(d) + ")");
    length += double(row[d]) * double(row[d]);
  }
  if (length > max_squared_length) {
    char text[64];
    std::snprintf(text, sizeof text, "%.3g", length);
    throw error(what + ": " + noun + " " + std::to_string(i) + " has a squared length of " + text +
                ": distances between vectors this long overflow float32 (at most 8.5e37); scale the vectors down");
  }
}

}  // namespace

void check_finite(const vector_set& s, const std::string& what) {
  if (s.type == vector_type::u8) return;  // 255^2 x dim: far below the bound
  std::vector<float> row(s.dim);
  for (uint64_t i = 0; i < s.count; ++i) {
    row_as_float(s, i, row.data());
    check_row(row.data(), s.dim, i, what, "row");
  }
}

void check_finite_rows(const float* rows, uint64_t n, uint32_t dim, const std::string& what) {
  for (uint64_t i = 0; i < n; ++i) check_row(rows + i * dim, dim, i, what, "query");
}

vector_type type_from_name(const std::string& path) {
  auto ends = [&](const char* s) {
    const size_t n = std::strlen(s);
    return path.size() >= n && path.compare(path.size() - n, n, s) == 0;
  };
  if (ends(".fbin")) return vector_type::f32;
  if (ends(".hbin")) return vector_type::f16;
  if (ends(".u8bin") || ends(".bbin")) return vector_type::u8;
  throw error(path + ": cannot tell the element type from the name (.fbin, .hbin or .u8bin; or say it with --type)");
}

vector_file::vector_file(const std::string& path, vector_type type) : path_(path) {
  detail::opened_file f = detail::open_for_reading(path, "vectors");
  bytes_ = uint64_t(f.st.st_size);
  if (bytes_ < 8) throw error(path + ": too short for a vector file (" + std::to_string(bytes_) + " bytes)");
  uint32_t head[2];
  if (::pread(f.fd.get(), head, 8, 0) != 8) throw error(path + ": cannot read the count and dimension");
  s_.count = head[0];
  s_.dim = head[1];
  s_.type = type;
  if (s_.count == 0) throw error(path + ": holds no vectors");
  if (s_.dim == 0 || s_.dim > max_dim) throw error(path + ": dimension " + std::to_string(s_.dim) + " (1 to 4096)");
  const uint64_t want = 8 + s_.count * s_.row_bytes();
  if (bytes_ != want)
    throw error(path + ": " + std::to_string(bytes_) + " bytes, but " + std::to_string(s_.count) + " x " +
                std::to_string(s_.dim) + " " + type_name(type) + " need " + std::to_string(want) +
                " (truncated, or another element type?)");
  map_ = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, f.fd.get(), 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw error(path + ": cannot map the file");
  }
  s_.data = static_cast<const uint8_t*>(map_) + 8;
  guard_ = detail::guard_mapping(map_, bytes_);
}

vector_file::~vector_file() {
  detail::unguard_mapping(guard_);
  if (map_) ::munmap(map_, bytes_);
}

void vector_file::check_whole() const {
  if (detail::mapping_cut(guard_)) throw error(path_ + ": the file was truncated while it was being read");
}

void write_vector_file(const std::string& path, const vector_set& s) {
  if (s.count > 0xFFFFFFFFull) throw error(path + ": a .bin file holds at most 2^32 - 1 vectors");
  detail::check_output_path(path);  // not a device or FIFO (a FIFO with no reader would hang)
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw error(path + ": cannot create the file");
  const uint32_t head[2] = {uint32_t(s.count), s.dim};
  out.write(reinterpret_cast<const char*>(head), 8);
  out.write(reinterpret_cast<const char*>(s.data), std::streamsize(s.count * s.row_bytes()));
  if (!out.flush()) throw error(path + ": write failed (disk full?)");
}

namespace {

// A uniform double in [0, 1) and a standard normal from hashes of (a, b, c).
double uniform(uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t h = detail::splitmix64_mix(a * 0x9E3779B97F4A7C15ull ^ detail::splitmix64_mix(b + 0x632BE59BD9B4E019ull * c + c));
  return double(h >> 11) * (1.0 / 9007199254740992.0);
}
double normal(uint64_t a, uint64_t b, uint64_t c) {
  const double u1 = uniform(a, b, 2 * c) + 1e-300, u2 = uniform(a, b, 2 * c + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

std::vector<uint8_t> generate_mixture(const mixture_options& o, uint64_t first, uint64_t n) {
  if (o.dim == 0 || o.dim > max_dim) throw error("generate: dimension " + std::to_string(o.dim) + " (1 to 4096)");
  if (o.clusters == 0) throw error("generate: at least one cluster");
  if (first > o.count || n > o.count - first) throw error("generate: rows past the set");
  const uint32_t eb = element_bytes(o.type);
  std::vector<uint8_t> out(n * o.dim * eb);
  const uint64_t centre_seed = o.seed * 2 + 1, row_seed = (o.seed << 8) + o.stream + 0x51ED;
  detail::parallel_for(n, 0, [&](unsigned, uint64_t b, uint64_t e) {
    for (uint64_t r = b; r < e; ++r) {
      const uint64_t i = first + r;
      const uint64_t c = uint64_t(uniform(row_seed, i, ~0ull) * o.clusters) % o.clusters;
      uint8_t* row = out.data() + r * o.dim * eb;
      double z[64];
      const uint32_t latent = std::min<uint32_t>(o.latent, 64);
      for (uint32_t l = 0; l < latent; ++l) z[l] = normal(row_seed ^ 0x1A7E47ull, i, l);
      for (uint32_t d = 0; d < o.dim; ++d) {
        double noise = latent ? 0.1 * normal(row_seed, i, d) : normal(row_seed, i, d);
        for (uint32_t l = 0; l < latent; ++l)  // the cluster's direction l, dimension d: N(0, 1 / latent)
          noise += z[l] * normal(centre_seed ^ 0xD1Bull, c * 64 + l, d) / std::sqrt(double(latent));
        if (o.type == vector_type::u8) {
          const double centre = 32.0 + 192.0 * uniform(centre_seed, c, d);
          row[d] = uint8_t(std::clamp(std::lround(centre + 40.0 * o.spread * noise), 0l, 255l));
        } else {
          const float v = float(normal(centre_seed, c, d) + o.spread * noise);
          if (o.type == vector_type::f32) {
            std::memcpy(row + 4 * d, &v, 4);
          } else {
            // float to half, round to nearest even (values here are small and normal).
            uint32_t bits;
            std::memcpy(&bits, &v, 4);
            const uint32_t sign = (bits >> 16) & 0x8000u;
            const int exp = int((bits >> 23) & 0xff) - 127 + 15;
            uint16_t h;
            if (exp <= 0) {
              h = uint16_t(sign);  // below half's normal range: zero
            } else if (exp >= 31) {
              h = uint16_t(sign | 0x7bffu);  // clamp to the largest finite half
            } else {
              uint32_t man = bits & 0x7fffffu;
              uint32_t half = (uint32_t(exp) << 10) | (man >> 13);
              const uint32_t rest = man & 0x1fffu;
              if (rest > 0x1000u || (rest == 0x1000u && (half & 1))) ++half;
              h = uint16_t(sign | half);
            }
            std::memcpy(row + 2 * d, &h, 2);
          }
        }
      }
    }
  });
  return out;
}

void exact_neighbours(const vector_set& base, const float* queries, uint64_t nq, uint32_t k, metric m, uint32_t* ids,
                      float* distances, unsigned threads) {
  if (k == 0 || k > base.count)
    throw error("exact neighbours: k = " + std::to_string(k) + " (1 to the " + std::to_string(base.count) +
                " vectors)");
  detail::parallel_for(nq, threads, [&](unsigned, uint64_t b, uint64_t e) {
    std::vector<float> row(base.dim);
    std::vector<std::pair<double, uint32_t>> best;
    for (uint64_t q = b; q < e; ++q) {
      const float* qv = queries + q * base.dim;
      best.clear();
      for (uint64_t i = 0; i < base.count; ++i) {
        row_as_float(base, i, row.data());
        double acc = 0;
        for (uint32_t d = 0; d < base.dim; ++d) {
          if (m == metric::l2) {
            const double diff = double(qv[d]) - row[d];
            acc += diff * diff;
          } else {
            acc += double(qv[d]) * row[d];
          }
        }
        const std::pair<double, uint32_t> c{m == metric::l2 ? acc : -acc, uint32_t(i)};
        if (best.size() < k) {
          best.push_back(c);
          std::push_heap(best.begin(), best.end());
        } else if (c < best.front()) {
          std::pop_heap(best.begin(), best.end());
          best.back() = c;
          std::push_heap(best.begin(), best.end());
        }
      }
      std::sort_heap(best.begin(), best.end());
      for (uint32_t j = 0; j < k; ++j) {
        ids[q * k + j] = best[j].second;
        distances[q * k + j] = float(best[j].first);
      }
    }
  });
}

double recall_at(uint32_t k, const uint32_t* found, uint32_t found_k, const uint32_t* truth, uint32_t truth_k,
                 uint64_t nq) {
  if (k == 0 || k > found_k || k > truth_k) throw error("recall@" + std::to_string(k) + ": k past the lists given");
  uint64_t hit = 0;
  for (uint64_t q = 0; q < nq; ++q) {
    const uint32_t* t = truth + q * truth_k;
    const uint32_t* f = found + q * found_k;
    for (uint32_t j = 0; j < k; ++j)
      if (std::find(t, t + k, f[j]) != t + k) ++hit;
  }
  return nq ? double(hit) / double(nq * k) : 0.0;
}

}  // namespace deepwell::vectors
