// The checkpoint store's on-disk format (checkpoint.cpp runs the save /
// load protocol over it). Layout of the namespace (little-endian; R = 64
// KiB, so that no two regions share a cache page whatever the page size):
//   [0, 512)          superblock copy 0      (region [0, R))
//   [R, R + 512)      superblock copy 1      (region [R, 2R))
//   [2R, ...)         manifest (written once, by create)
//   slot 0, slot 1    each: the buffers (a buffer of at least one unit at a
//                     unit-aligned offset, smaller ones packed at 512-byte
//                     offsets), then the slot's table: a 64-byte header
//                     (store id, generation, slot) and one 64-bit hash per unit
// Generation g (>= 1) lives in slot g % 2 and is described by copy g % 2;
// generation 0 (formatted, nothing saved) is copy 0.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "deepwell/durable/checkpoint.hpp"

namespace deepwell::checkpoint_format {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the checkpoint format is little-endian");

constexpr uint64_t region = 64 * 1024;
constexpr uint32_t header_size = 512;
constexpr uint32_t table_header_size = 64;
constexpr uint32_t format_version = 1;
constexpr uint64_t small_align = 512;
constexpr uint32_t max_name = 1024, max_dtype = 64, max_dims = 32;
constexpr uint64_t max_buffers = 1u << 20;
constexpr uint64_t max_manifest_bytes = 256ull << 20;
// Hash seeds: one domain each, so that no kind of record can pass for another.
constexpr uint64_t seed_header = 0x4857434b50545342ull, seed_manifest = 0x4857434b5054464dull,
                   seed_table = 0x4857434b50544254ull;
constexpr char sb_magic[8] = {'D', 'W', 'C', 'K', 'P', 'T', 'S', 'B'};
constexpr char table_magic[8] = {'D', 'W', 'C', 'K', 'P', 'T', 'T', 'B'};
constexpr char manifest_magic[8] = {'D', 'W', 'C', 'K', 'P', 'T', 'M', 'F'};

struct sb_header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint8_t store_id[16];
  uint64_t generation;  // 0: formatted, nothing saved
  uint32_t copy;        // the copy this is (its position)
  uint32_t slot;        // where generation's checkpoint lives (generation >= 1)
  uint32_t unit;
  uint32_t buffers;
  uint64_t region_bytes;
  uint64_t manifest_offset;
  uint64_t manifest_bytes;
  uint64_t manifest_checksum;
  uint64_t slot_offset[2];
  uint64_t slot_stride;
  uint64_t data_bytes;
  uint64_t table_offset;  // inside a slot
  uint64_t table_bytes;
  uint64_t units;
  uint64_t store_bytes;
  uint64_t table_checksum;  // of this generation's slot table
  uint64_t saved_unix_ns;
  uint8_t reserved[header_size - 168 - 8];
  uint64_t checksum;  // of bytes [0, 504)
};
static_assert(sizeof(sb_header) == header_size);
static_assert(offsetof(sb_header, checksum) == header_size - 8);

struct table_header {
  char magic[8];
  uint32_t version;
  uint32_t slot;
  uint8_t store_id[16];
  uint64_t generation;
  uint64_t units;
  uint64_t reserved[2];
};
static_assert(sizeof(table_header) == table_header_size);

inline uint64_t hash_of(const void* p, uint64_t n, uint64_t seed) { return checkpoint_hash::of(p, n, seed); }
inline uint64_t units_of(uint64_t bytes, uint32_t unit) { return (bytes + unit - 1) / unit; }
inline uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// Where everything is, from the manifest and the unit.
struct layout {
  std::vector<uint64_t> offset;      // per buffer, inside a slot
  std::vector<uint64_t> first_unit;  // per buffer: its units are [first_unit, first_unit + units_of(bytes))
  uint64_t units = 0, data_bytes = 0, table_offset = 0, table_bytes = 0, slot_stride = 0;
  uint64_t manifest_offset = 2 * region, manifest_bytes = 0, slot_offset[2] = {0, 0}, store_bytes = 0;
};

std::string hex(const uint8_t* p, size_t n);
std::string hex64(uint64_t v);
std::string shape_text(const std::vector<int64_t>& s);
std::string spec_text(const tensor_spec& t);
void check_manifest_shape(const checkpoint_manifest& m);
uint64_t buffer_align(uint64_t bytes, uint32_t unit);
std::vector<uint8_t> encode_manifest(const checkpoint_manifest& m, const std::vector<uint64_t>& offsets);
layout make_layout(const checkpoint_manifest& m, uint32_t unit);
checkpoint_manifest decode_manifest(const std::vector<uint8_t>& img, std::vector<uint64_t>& offsets);
uint64_t header_checksum(const sb_header& h);
bool is_blank(const uint8_t* raw);
std::string header_problem(const uint8_t* raw, uint32_t position, sb_header& h);

}  // namespace deepwell::checkpoint_format
