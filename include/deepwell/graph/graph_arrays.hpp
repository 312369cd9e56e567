// A graph file's sections opened as deepwell datasets: the file is a
// dataset of the cache's link (a file a controller in this process opens,
// or a server's dataset granted to this client), and each section (offsets,
// neighbours, weights) a section of it (section.hpp), served through the
// cache as an array. view()
// gives the cached_graph kernels and CPU threads take by value. A version-2
// file's sections are checked datasets (file_sums.hpp): a block that does
// not match its sum fails its read, and the direct tier gets a section's
// mapping only once all of it has been checked.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/graph/csr_file.hpp"
#include "deepwell/graph/edges.hpp"
#include "deepwell/views/array.hpp"

namespace deepwell::graph {

struct graph_dataset_options {
  bool direct_io = false;     // O_DIRECT (a controller in this process; a server's config decides its own)
  uint32_t block_size = 4096; // namespace block size (<= the cache's page size)
  // Check the file's offsets first (csr_file::check_offsets: O(nodes), on
  // every core): a corrupt offset would send a list past the neighbour
  // array, and the algorithms would run on with the reads the cache refused
  // (recorded in its last_error(), not thrown). The command line checks
  // once before any run and passes false.
  bool check_offsets = true;
  // A version-2 file's sections as checked datasets (every page the cache
  // reads checked against its 4 KiB block sums; a page smaller than a
  // block reads and checks the whole block). False: read unchecked, for
  // callers that ran csr_file::verify() first.
  bool checked = true;
};

class graph_arrays {
 public:
  graph_arrays(std::shared_ptr<page_cache> cache, const csr_file& f,
               const graph_dataset_options& o = {});
  // Offsets through the cache unless `offsets_in_memory` (an address the
  // clients can read: device memory for GPU clients) is given. `stream`:
  // one-touch reads go straight to the direct tier when the lists are there.
  cached_graph view(const uint64_t* offsets_in_memory = nullptr, bool stream = false) const;
  page_cache& cache() const { return *cache_; }
  const std::string& path() const { return path_; }
  // Whether the edge lists are read through the direct tier (a registered
  // mapping of the file, no controller round trip) rather than the queues.
  bool edges_direct() const { return cache_->dataset(nbr_->ref().dataset).source.mapped() != nullptr; }
  // The namespace of a section (0 for weights the file does not have).
  uint32_t section_namespace(csr_section s) const { return nsid_[int(s)]; }

 private:
  std::shared_ptr<page_cache> cache_;
  std::string path_;
  uint64_t nodes_ = 0;
  uint32_t nsid_[3] = {};  // by csr_section
  std::unique_ptr<array<uint64_t>> offsets_;
  std::unique_ptr<array<uint32_t>> nbr_, wts_;
};

}  // namespace deepwell::graph
