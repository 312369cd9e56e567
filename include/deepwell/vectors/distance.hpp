// Distances as CPU and GPU clients both compute them, to the same bits: a
// search gives the same neighbours on either. Products and sums are rounded
// one at a time (never fused into an FMA), in one fixed order:
//   - exact distances: 32 partial sums, partial l over dims l, l + 32, ...,
//     then combined as a warp's butterfly (l + (l ^ 16), then ^ 8, ... ^ 1);
//   - the quantised distance: the lookup table's entries in subspace order.
// Smaller is nearer: squared L2, or the negated inner product.
#pragma once
#include <cstdint>
#include <cstring>

#include "deepwell/common/config.hpp"
#include "deepwell/vectors/format.hpp"

namespace deepwell::vectors {

DW_HD DW_FORCEINLINE float mul_rn(float a, float b) {
#if DW_DEVICE_CODE
  return __fmul_rn(a, b);
#else
  return a * b;  // the library's vectors sources build with -ffp-contract=off
#endif
}
DW_HD DW_FORCEINLINE float add_rn(float a, float b) {
#if DW_DEVICE_CODE
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// IEEE half to float (exact; subnormals, infinities and NaN kept).
DW_HD inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while (!(man & 0x400u)) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

// Element d of a stored vector, as float.
DW_HD DW_FORCEINLINE float element(const uint8_t* v, uint32_t d, vector_type t) {
  if (t == vector_type::u8) return float(v[d]);
  if (t == vector_type::f16) {
    uint16_t h;
    memcpy(&h, v + 2 * d, 2);
    return half_to_float(h);
  }
  float f;
  memcpy(&f, v + 4 * d, 4);
  return f;
}

// Lane l's partial sum of the exact distance (dims l, l + 32, ...).
DW_HD inline float distance_partial(const float* q, const uint8_t* v, uint32_t dim, vector_type t, metric m,
                                    unsigned lane) {
  float acc = 0.f;
  for (uint32_t d = lane; d < dim; d += 32) {
    const float x = element(v, d, t);
    if (m == metric::l2) {
      const float diff = q[d] - x;
      acc = add_rn(acc, mul_rn(diff, diff));
    } else {
      acc = add_rn(acc, mul_rn(q[d], x));
    }
  }
  return acc;
}

// The exact distance by one thread, in the warp's order.
inline float exact_distance(const float* q, const uint8_t* v, uint32_t dim, vector_type t, metric m) {
  float p[32], n[32];
  for (unsigned l = 0; l < 32; ++l) p[l] = distance_partial(q, v, dim, t, m, l);
  for (unsigned off = 16; off; off >>= 1) {
    for (unsigned l = 0; l < 32; ++l) n[l] = add_rn(p[l], p[l ^ off]);
    for (unsigned l = 0; l < 32; ++l) p[l] = n[l];
  }
  return m == metric::l2 ? p[0] : -p[0];
}

#if defined(__CUDACC__)
// The exact distance by a whole warp (every lane gets it).
DW_DEVICE inline float warp_exact_distance(const float* q, const uint8_t* v, uint32_t dim, vector_type t, metric m,
                                           unsigned lane) {
  float acc = distance_partial(q, v, dim, t, m, lane);
  for (unsigned off = 16; off; off >>= 1) acc = add_rn(acc, __shfl_xor_sync(0xffffffffu, acc, off));
  return m == metric::l2 ? acc : -acc;
}
#endif

// Entry (sub, c) of a query's lookup table: the distance between the
// query's sub-vector and centroid c of subspace `sub`.
DW_HD inline float table_entry(const float* q, const float* codebook, uint32_t sub_dim, uint32_t sub, uint32_t c,
                               metric m) {
  const float* qs = q + sub * sub_dim;
  const float* cs = codebook + (uint64_t(sub) * pq_centroids + c) * sub_dim;
  float acc = 0.f;
  for (uint32_t j = 0; j < sub_dim; ++j) {
    if (m == metric::l2) {
      const float diff = qs[j] - cs[j];
      acc = add_rn(acc, mul_rn(diff, diff));
    } else {
      acc = add_rn(acc, mul_rn(qs[j], cs[j]));
    }
  }
  return m == metric::l2 ? acc : -acc;
}

// The quantised distance of a code (M bytes) from a query's table.
DW_HD DW_FORCEINLINE float code_distance(const float* table, const uint8_t* code, uint32_t subspaces) {
  float acc = 0.f;
  for (uint32_t s = 0; s < subspaces; ++s) acc = add_rn(acc, table[s * pq_centroids + code[s]]);
  return acc;
}

// The search's order: nearer first, the lower id first among equals.
DW_HD DW_FORCEINLINE bool before(float da, uint32_t a, float db, uint32_t b) {
  return da < db || (da == db && a < b);
}

}  // namespace deepwell::vectors
