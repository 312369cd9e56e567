// The deepwell CSR graph file (".dwg"): a fixed 4 KiB header, then the
// offsets, neighbour and (optional) weight arrays, each starting on a 64 KiB
// boundary so that every section can be opened as its own deepwell dataset
// (a file target with an offset) with any page size and O_DIRECT alignment.
//
//   byte 0          csr_header (little-endian, 4096 bytes with padding)
//   offsets_at      (nodes + 1) x uint64: neighbours of v are [offsets[v], offsets[v+1])
//   neighbours_at   edges x id_bytes (uint32 or uint64 node ids)
//   weights_at      edges x uint32 or float32, weight of the same edge (when weight_type != none)
//   sums_at         (version 2) the sums section: a CRC-32C a 4 KiB block of
//                   offsets, neighbours and weights, in that order, in
//                   block_sum()'s stored form (deepwell/targets/file_sums.hpp)
//
// `edges` counts directed entries: an undirected graph stores both directions
// and carries the `symmetric` flag. Version 2 adds the sums section and two
// CRC-32Cs in the header (the header's own, the sums section's); version 1
// files (no sums) are still read, unchecked. docs/graphs.md describes the format.
#pragma once
#include <cstdint>

namespace deepwell::graph {

inline constexpr char csr_magic[8] = {'D', 'W', 'G', 'R', 'A', 'P', 'H', '1'};
inline constexpr uint32_t csr_version = 2;         // what write_csr writes
inline constexpr uint32_t csr_version_unchecked = 1;  // no sums: still read
inline constexpr uint64_t csr_header_bytes = 4096;
inline constexpr uint64_t csr_section_align = 65536;

enum class weight_type : uint32_t { none = 0, u32 = 1, f32 = 2 };

// Flags: facts the writer checked, which readers may rely on.
enum csr_flags : uint32_t {
  csr_symmetric = 1u << 0,   // u->v present iff v->u present (with equal weights)
  csr_sorted = 1u << 1,      // each neighbour list ascending
  csr_simple = 1u << 2,      // no self loops, no duplicate edges
};

struct csr_header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;   // csr_header_bytes
  uint64_t nodes;
  uint64_t edges;          // neighbour entries (directed)
  uint32_t id_bytes;       // 4 or 8
  weight_type weights;
  uint32_t flags;          // csr_flags
  uint32_t reserved0;
  uint64_t offsets_at;     // byte offsets of the sections in the file
  uint64_t neighbours_at;
  uint64_t weights_at;     // 0 when weights == none
  uint64_t file_bytes;     // the whole file, padding included
  uint64_t seed;           // generator seed (0 for converted graphs)
  char origin[64];         // "kron scale=20 degree=16", "snap web.txt", ... (NUL-terminated)
  // Version 2 (zeros in version 1):
  uint64_t sums_at;        // the sums section (a 64 KiB boundary past the last data section)
  uint64_t sums_bytes;     // 4 bytes a 4 KiB block of each data section
  uint32_t sums_crc;       // CRC-32C of the sums section's sums_bytes bytes
  uint32_t header_crc;     // CRC-32C of this struct (sizeof(csr_header) bytes) with header_crc 0
};
static_assert(sizeof(csr_header) <= csr_header_bytes);

inline constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Where each section goes for a graph of this size (the writer's layout).
struct csr_layout {
  uint64_t offsets_at, neighbours_at, weights_at, sums_at, sums_bytes, file_bytes;
};
inline constexpr uint64_t csr_sum_block = 4096;  // bytes of a section covered by one sum
inline constexpr uint64_t csr_sums_of(uint64_t bytes) { return (bytes + csr_sum_block - 1) / csr_sum_block; }
inline constexpr csr_layout layout_for(uint64_t nodes, uint64_t edges, uint32_t id_bytes, weight_type w,
                                       uint32_t version = csr_version) {
  csr_layout l{};
  l.offsets_at = align_up(csr_header_bytes, csr_section_align);
  l.neighbours_at = align_up(l.offsets_at + (nodes + 1) * 8, csr_section_align);
  const uint64_t after_neighbours = align_up(l.neighbours_at + edges * id_bytes, csr_section_align);
  l.weights_at = w == weight_type::none ? 0 : after_neighbours;
  const uint64_t data_end =
      w == weight_type::none ? after_neighbours : align_up(l.weights_at + edges * 4, csr_section_align);
  if (version == csr_version_unchecked) {
    l.file_bytes = data_end;
    return l;
  }
  const uint64_t sums = csr_sums_of((nodes + 1) * 8) + csr_sums_of(edges * id_bytes) +
                        (w == weight_type::none ? 0 : csr_sums_of(edges * 4));
  l.sums_at = data_end;
  l.sums_bytes = sums * 4;
  l.file_bytes = align_up(l.sums_at + l.sums_bytes, csr_section_align);
  return l;
}

}  // namespace deepwell::graph
