// Graphs on the host: csr_graph (built in memory by generators and
// converters), write_csr (to a .dwg file), and csr_file (an open, checked,
// read-only mapping of one). Errors throw deepwell::error naming the file and
// the problem (truncated, wrong magic, a header or block that does not match
// its checksum, offsets not monotone, id out of range).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepwell/graph/csr_format.hpp"

namespace deepwell::graph {

// Progress on stderr for the long-running tools: a bar on a terminal, one
// line per phase otherwise. Safe to call from several threads.
class progress {
 public:
  explicit progress(bool enabled = true);
  ~progress();
  void phase(const std::string& name, uint64_t total);
  void advance(uint64_t n);
  void done();

 private:
  struct state;
  std::unique_ptr<state> s_;
};

// A graph in host memory. Exactly one of nbr32 / nbr64 is used (id_bytes).
struct csr_graph {
  uint64_t nodes = 0;
  uint32_t id_bytes = 4;
  uint32_t flags = 0;
  weight_type weights = weight_type::none;
  std::vector<uint64_t> offsets;  // nodes + 1
  std::vector<uint32_t> nbr32;
  std::vector<uint64_t> nbr64;
  std::vector<uint32_t> wts;      // raw 32-bit weights (uint32 or float bits), one per edge
  uint64_t seed = 0;
  std::string origin;

  uint64_t edges() const { return offsets.empty() ? 0 : offsets.back(); }
  uint64_t neighbour(uint64_t e) const { return id_bytes == 4 ? nbr32[e] : nbr64[e]; }
};

void write_csr(const std::string& path, const csr_graph& g, progress* p = nullptr);

// The node of largest degree (the lowest id among equals), from the offsets alone.
uint64_t max_degree_node(const uint64_t* offsets, uint64_t nodes);

// Summary statistics (the `info` command).
struct csr_stats {
  uint64_t max_degree = 0, max_degree_node = 0, zero_degree = 0, self_loops = 0;
  double mean_degree = 0;
};

// The data sections of a graph file, in the order of their sums.
enum class csr_section { offsets, neighbours, weights };
const char* section_name(csr_section s);

// An open graph file: the header is checked against the file size (and, in
// version 2, against its checksum, as is the sums section) at open;
// verify() checks every block of the data against its sum; check() scans
// the arrays (offsets monotone and in range, every id < nodes).
class csr_file {
 public:
  explicit csr_file(const std::string& path);
  ~csr_file();
  csr_file(const csr_file&) = delete;
  csr_file& operator=(const csr_file&) = delete;

  const std::string& path() const { return path_; }
  const csr_header& header() const { return h_; }
  uint64_t nodes() const { return h_.nodes; }
  uint64_t edges() const { return h_.edges; }
  bool symmetric() const { return h_.flags & csr_symmetric; }
  // Version 2: the data has block sums (version 1 files have none and are read unchecked).
  bool checksummed() const { return h_.version >= 2; }

  // The mapped sections (the file's page cache).
  const uint64_t* offsets() const { return reinterpret_cast<const uint64_t*>(base_ + h_.offsets_at); }
  const void* neighbours() const { return base_ + h_.neighbours_at; }
  const uint32_t* neighbours32() const;  // throws unless id_bytes == 4
  const uint32_t* weights() const;       // nullptr when the graph has none
  uint64_t neighbour(uint64_t e) const {
    return h_.id_bytes == 4 ? static_cast<const uint32_t*>(neighbours())[e]
                            : static_cast<const uint64_t*>(neighbours())[e];
  }
  uint64_t degree(uint64_t v) const { return offsets()[v + 1] - offsets()[v]; }

  // Byte ranges of the sections in the file (for file targets).
  uint64_t offsets_bytes() const { return (h_.nodes + 1) * 8; }
  uint64_t neighbours_bytes() const { return h_.edges * h_.id_bytes; }
  uint64_t weights_bytes() const { return h_.weights == weight_type::none ? 0 : h_.edges * 4; }

  uint64_t max_degree_node() const { return graph::max_degree_node(offsets(), h_.nodes); }
  // Unmaps this process's view of the file's pages (they stay valid to
  // read: touching them maps them again), so that posix_fadvise(DONTNEED)
  // can drop them from the page cache: it leaves pages a process maps.
  void release_pages() const;

  // A section's place and size in the file, and its block sums (a copy;
  // empty in version 1): what a checked dataset of it needs (file_sums.hpp).
  uint64_t section_at(csr_section s) const;
  uint64_t section_bytes(csr_section s) const;
  std::vector<uint32_t> section_sums(csr_section s) const;
  // Where in the file a section's sums start (version 2).
  uint64_t section_sums_at(csr_section s) const { return h_.sums_at + 4 * first_sum(s); }

  // Checks every 4 KiB block of the mapped sections against its sum, on
  // `threads` threads (0: every core); throws deepwell::error naming the
  // file, the section and the bytes of the first bad block. False (and no
  // check) for a version-1 file, which has no sums. The CPU readers of the
  // mapping call it before using the data; reads through the controller
  // check their own pages (graph_arrays).
  bool verify(unsigned threads = 0, progress* p = nullptr) const;
  // One section only (the same rules).
  bool verify(csr_section s, unsigned threads = 0) const;
  // Full scan; throws naming the first bad offset or id.
  void check(unsigned threads = 0, progress* p = nullptr) const;
  // The offsets alone (O(nodes)): monotone and within the edges, so that a
  // list never runs past the neighbour array. The graph runners check this
  // much before any algorithm; ids out of range are counted as they are met.
  void check_offsets(unsigned threads = 0) const;
  // Degrees and self loops, after the offsets' and neighbours' blocks are
  // verified against their sums and the offsets checked (throws naming the
  // first bad block or offset).
  csr_stats stats(unsigned threads = 0) const;
  // A copy in memory (tests, small graphs), verified and its offsets checked.
  csr_graph load() const;
  // Throws where the file was cut short (truncated) while mapped: what
  // was past its new end read as zeros since.
  void check_whole() const;

 private:
  std::string path_;
  csr_header h_{};
  const uint8_t* base_ = nullptr;
  uint64_t mapped_ = 0;
  int guard_ = -1;              // against the file being cut short under the mapping
  std::vector<uint32_t> sums_;  // version 2: the sums section, checked against its CRC at open
  uint64_t first_sum(csr_section s) const;
};

// Checks a header read from a file of `file_bytes` bytes; throws naming the
// first problem (`what` names the file in messages).
void check_header(const csr_header& h, uint64_t file_bytes, const std::string& what);

}  // namespace deepwell::graph
