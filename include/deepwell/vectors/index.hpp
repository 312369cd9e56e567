// An index file opened on a page cache: the file a dataset of the cache's
// link (a file a controller in this process opens, or a server's dataset
// granted to this client, which it need not be able to open itself), read
// only over that link; the records a section of it, checked against its
// block sums on every page the cache reads; the header checked, and the
// codebook and the codes read once, checked, and kept in host memory
// (gpu_search.hpp copies them to the GPU).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/vectors/index_file.hpp"
#include "deepwell/vectors/search.hpp"
#include "deepwell/views/array.hpp"

namespace deepwell::vectors {

struct index_open_options {
  bool direct_io = false;      // O_DIRECT (a controller in this process; a server decides its own)
  uint32_t block_size = 4096;  // namespace block size (<= the cache's page size)
  bool checked = true;         // every record page checked against its sum as the cache reads it
};

// The header of the index `path` read over `link` as vector_index reads the
// file (under a server: a dataset this client may read but need not be able
// to open): what to shape the cache by (its page: header().page_bytes)
// before there is one.
index_header read_index_header(const std::shared_ptr<controller_link>& link, const std::string& path,
                               const index_open_options& o = {});

class vector_index {
 public:
  vector_index(std::shared_ptr<page_cache> cache, const std::string& path, const index_open_options& o = {});

  const index_header& header() const { return file_.header(); }
  const index_file& file() const { return file_; }
  const std::vector<float>& codebook() const { return codebook_; }
  const std::vector<uint8_t>& codes() const { return codes_; }
  const std::vector<uint32_t>& labels() const { return labels_; }
  page_cache& cache() const { return *cache_; }
  const std::shared_ptr<page_cache>& shared_cache() const { return cache_; }
  array_ref<uint8_t> records() const { return records_->ref(); }
  // The view with the codebook and codes in host memory (CPU clients).
  index_view host_view() const;

  // Searches with CPU threads (a host page cache): search_cpu on host_view().
  // A record the cache could not read throws deepwell::data_error naming it.
  search_counts search(const float* queries, uint64_t nq, const search_options& o, uint32_t* ids, float* distances,
                       unsigned threads = 0) const;
  // Throws deepwell::data_error naming the file where it was cut short
  // (truncated) under the cache's mapping of it: results since are suspect.
  void check_whole() const;

 private:
  std::shared_ptr<page_cache> cache_;
  uint32_t dataset_;  // the file, a dataset of the cache's link
  index_file file_;
  std::vector<float> codebook_;
  std::vector<uint8_t> codes_;
  std::vector<uint32_t> labels_;
  std::unique_ptr<array<uint8_t>> records_;
};

}  // namespace deepwell::vectors
