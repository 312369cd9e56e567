// CRC-32C. With SSE4.2, three streams of the crc32 instruction run side by
// side over a run's three thirds and are joined by a shift of the register
// (the instruction takes 3 cycles and issues one a cycle, so one stream
// leaves two thirds of it idle); a 4 KiB block of a checked dataset is
// summed on every page the controller reads: a BFS through the controller
// on an H200 machine ran at 0.68 of its speed without the sums with one
// stream, 0.82 with three. Mark Adler's crc32c.c (zlib's author, on Stack
// Overflow) describes the method.
#include "deepwell/common/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace deepwell {
namespace {

constexpr uint32_t poly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ poly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto table = make_table();

uint32_t crc_by_table(uint32_t crc, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// Bytes of each of the three streams: 3 x 1360 = 4080, a 4 KiB block less
// 16 bytes, so that a block is one run.
constexpr size_t stream_bytes = 1360;

// The register after `stream_bytes` zero bytes, as a function of the
// register before (linear over GF(2)): four tables, one a byte of the
// register, each entry the image of that byte's value.
struct shift_tables {
  uint32_t t[4][256];
};

__attribute__((target("sse4.2"))) uint32_t zeros_after(uint32_t reg) {
  uint64_t c = reg;
  for (size_t i = 0; i < stream_bytes; i += 8) c = _mm_crc32_u64(c, 0);
  return uint32_t(c);
}

shift_tables make_shift_tables() {
  shift_tables s{};
  uint32_t bit_image[32];
  for (int b = 0; b < 32; ++b) bit_image[b] = zeros_after(uint32_t(1) << b);
  for (int k = 0; k < 4; ++k)
    for (uint32_t v = 0; v < 256; ++v) {
      uint32_t img = 0;
      for (int b = 0; b < 8; ++b)
        if (v >> b & 1) img ^= bit_image[8 * k + b];
      s.t[k][v] = img;
    }
  return s;
}

uint32_t shift(const shift_tables& s, uint32_t reg) {
  return s.t[0][reg & 0xFF] ^ s.t[1][reg >> 8 & 0xFF] ^ s.t[2][reg >> 16 & 0xFF] ^ s.t[3][reg >> 24];
}

__attribute__((target("sse4.2"))) uint32_t crc_by_instruction(uint32_t crc, const uint8_t* p, size_t n) {
  static const shift_tables tables = make_shift_tables();
  uint64_t c = crc;
  // CRC of (A, B) = shift(CRC of A, |B|) ^ (CRC of B from a zero register).
  for (; n >= 3 * stream_bytes; n -= 3 * stream_bytes, p += 3 * stream_bytes) {
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < stream_bytes; i += 8) {
      uint64_t w0, w1, w2;
      std::memcpy(&w0, p + i, 8);
      std::memcpy(&w1, p + stream_bytes + i, 8);
      std::memcpy(&w2, p + 2 * stream_bytes + i, 8);
      c = _mm_crc32_u64(c, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
    }
    c = shift(tables, shift(tables, uint32_t(c)) ^ uint32_t(c1)) ^ uint32_t(c2);
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  uint32_t c32 = uint32_t(c);
  for (; n; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}
const bool have_instruction = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

uint32_t crc32c(uint32_t crc, const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (have_instruction) return ~crc_by_instruction(crc, p, bytes);
#endif
  return ~crc_by_table(crc, p, bytes);
}

}  // namespace deepwell
