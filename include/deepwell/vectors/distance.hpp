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

// The squared L2 distance between two float rows, in the warp's order as
// above: what the index build compares (CPU threads and the GPU alike).
DW_HD DW_FORCEINLINE float row_partial(const float* a, const float* b, uint32_t dim, unsigned lane) {
  float acc = 0.f;
  for (uint32_t d = lane; d < dim; d += 32) {
    const float x = a[d] - b[d];
    acc = add_rn(acc, mul_rn(x, x));
  }
  return acc;
}

// By one thread; written lane-major so that the compiler keeps the 32
// partial sums in vector registers. Lane 0's value after the butterfly
// needs only the lanes below each step's offset, and a lane past the
// dimension holds +0, which leaves a sum unchanged (no partial is ever -0:
// each starts at +0 and adds squares): those additions are skipped.
DW_HD inline float row_l2(const float* a, const float* b, uint32_t dim) {
  float p[32];
  uint32_t d = 0;
#if DW_DEVICE_CODE
  // Constant indices (predicated) keep p in registers.
  for (unsigned l = 0; l < 32; ++l) p[l] = 0.f;
  for (; d + 32 <= dim; d += 32)
    for (unsigned l = 0; l < 32; ++l) {
      const float x = a[d + l] - b[d + l];
      p[l] = add_rn(p[l], mul_rn(x, x));
    }
  for (unsigned l = 0; l < 32; ++l)
    if (d + l < dim) {
      const float x = a[d + l] - b[d + l];
      p[l] = add_rn(p[l], mul_rn(x, x));
    }
  unsigned live = dim < 32 ? dim : 32;
  for (unsigned off = 16; off; off >>= 1) {
    for (unsigned l = 0; l < off; ++l)
      if (l + off < live) p[l] = add_rn(p[l], p[l + off]);
    if (live > off) live = off;
  }
#else
  // Short loops for short rows (the quantiser's subspaces: +0 + x is x).
  if (dim < 32) {
    for (unsigned l = 0; l < dim; ++l) {
      const float x = a[l] - b[l];
      p[l] = mul_rn(x, x);
    }
    d = dim;
  } else {
    for (unsigned l = 0; l < 32; ++l) p[l] = 0.f;
  }
  for (; d + 32 <= dim; d += 32)
    for (unsigned l = 0; l < 32; ++l) {
      const float x = a[d + l] - b[d + l];
      p[l] = add_rn(p[l], mul_rn(x, x));
    }
  for (unsigned l = 0; d + l < dim; ++l) {
    const float x = a[d + l] - b[d + l];
    p[l] = add_rn(p[l], mul_rn(x, x));
  }
  unsigned live = dim < 32 ? dim : 32;
  for (unsigned off = 16; off; off >>= 1) {
    for (unsigned l = 0; l < off && l + off < live; ++l) p[l] = add_rn(p[l], p[l + off]);
    if (live > off) live = off;
  }
#endif
  return p[0];
}

#if defined(__CUDACC__)
DW_DEVICE DW_FORCEINLINE float warp_row_l2(const float* a, const float* b, uint32_t dim, unsigned lane) {
  float acc = row_partial(a, b, dim, lane);
  for (unsigned off = 16; off; off >>= 1) acc = add_rn(acc, __shfl_xor_sync(0xffffffffu, acc, off));
  return acc;
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
