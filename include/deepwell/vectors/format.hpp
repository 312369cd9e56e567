// The on-storage vector index (.dwv): a proximity graph whose node records
// (the full vector and its neighbour list) are packed into pages, with the
// product-quantisation codebook and every vector's code in sections of
// their own that a search keeps in memory (HBM for GPU clients).
//
//   [header: 4 KiB][records][codebook][codes][labels][sums]
//
// Nodes are numbered in the order their records are laid out, which the
// build chooses so that a page holds a node and its graph neighbours (a
// page read then serves several steps of a search); labels[i] is node i's
// row in the vectors the index was built from: what a search returns.
// Records: node i at records_at + (i / records_per_page) * page_bytes +
// (i % records_per_page) * record_bytes, so a record never straddles two
// pages: a search reads one page a visited node. A record is the vector
// (dim elements of vector_type), then uint32 degree, then `degree` slots of
// uint32 neighbour ids (degree_used of them valid), zero padding to
// record_bytes (a multiple of 16).
// Codebook: pq_subspaces x 256 centroids x pq_sub_dim float32.
// Codes: count x pq_subspaces bytes, by node.
// Labels: count x uint32.
// Sums: a CRC-32C per 4 KiB block of the records, the codebook, the codes
// and the labels in that order (file_sums.hpp), so that the controller checks each record
// page it reads and the open checks the sections it loads.
// Everything little-endian.
#pragma once
#include <cstdint>

#include "deepwell/common/config.hpp"

namespace deepwell::vectors {

inline constexpr char index_magic[8] = {'D', 'W', 'V', 'E', 'C', 'I', 'X', '1'};
inline constexpr uint32_t index_version = 2;
inline constexpr uint32_t index_header_bytes = 4096;
inline constexpr uint32_t pq_centroids = 256;  // one byte a code
inline constexpr uint32_t max_dim = 4096;
inline constexpr uint32_t max_degree = 256;

enum class vector_type : uint32_t { f32 = 0, f16 = 1, u8 = 2 };
enum class metric : uint32_t { l2 = 0, inner_product = 1 };

DW_HD constexpr uint32_t element_bytes(vector_type t) {
  return t == vector_type::f32 ? 4u : t == vector_type::f16 ? 2u : 1u;
}
const char* type_name(vector_type t);
const char* metric_name(metric m);

struct index_header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(index_header)
  uint64_t count;         // vectors (nodes); ids are uint32
  uint32_t dim;
  vector_type type;
  metric distance;
  uint32_t degree;            // neighbour slots a record
  uint32_t record_bytes;      // a multiple of 16
  uint32_t page_bytes;        // records are packed into pages of this size
  uint32_t records_per_page;
  uint32_t pq_subspaces;      // M: codes are M bytes
  uint32_t pq_sub_dim;        // dim / M
  uint32_t reserved0;
  uint64_t entry;             // where every search starts (the medoid)
  uint64_t records_at, records_bytes;
  uint64_t codebook_at, codebook_bytes;
  uint64_t codes_at, codes_bytes;
  uint64_t labels_at, labels_bytes;
  uint64_t sums_at, sums_bytes;
  // How it was built (for the record; a search needs none of it).
  uint64_t build_seed;
  uint32_t build_list;
  float build_alpha;
  uint32_t sums_crc;    // CRC-32C of the sums section
  uint32_t header_crc;  // CRC-32C of the header's bytes before this field
};

// Where a node's record starts inside the records section.
DW_HD inline uint64_t record_offset(const index_header& h, uint64_t node) {
  return (node / h.records_per_page) * h.page_bytes + (node % h.records_per_page) * h.record_bytes;
}
// Byte offsets inside a record.
DW_HD inline uint32_t record_degree_at(uint32_t dim, vector_type t) { return (dim * element_bytes(t) + 3) & ~3u; }
DW_HD inline uint32_t record_neighbours_at(uint32_t dim, vector_type t) { return record_degree_at(dim, t) + 4; }
DW_HD inline uint32_t record_bytes_for(uint32_t dim, vector_type t, uint32_t degree) {
  return (record_neighbours_at(dim, t) + 4 * degree + 15) & ~15u;
}

}  // namespace deepwell::vectors
