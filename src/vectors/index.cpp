#include "deepwell/vectors/index.hpp"

#include "deepwell/targets/file_sums.hpp"

namespace deepwell::vectors {

namespace {

// The index file as the cache's link serves it (a file a controller in this
// process opens, or a server's dataset this client may read but perhaps not
// open itself): the header, sums, codebook and codes are read by the host
// through a small host cache on the same link, made for each read and gone
// with it (kept open beside the search's cache, it would hold one of the
// controller's queue pairs for nothing and share its turns).
index_file over_the_link(const std::shared_ptr<controller_link>& link, const std::string& path, uint32_t dataset) {
  auto reader = [link](uint32_t ds) {
    cache_config c;
    c.page_size = 64 << 10;
    c.capacity_bytes = 64ull * c.page_size;
    c.queue_pairs = 1;
    return std::make_unique<array<uint8_t>>(make_host_page_cache(link, c), ds);
  };
  return index_file(path, link->info(dataset).bytes, [reader, dataset, path](void* to, uint64_t offset, uint64_t n) {
    const request_status s = reader(dataset)->ref().read_range(static_cast<uint8_t*>(to), offset, n);
    if (!s.ok())
      throw data_error(path + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                       ") could not be read: " + describe(s));
  });
}

// The link, kept alive by the cache that owns it (shared_ptr's aliasing form).
std::shared_ptr<controller_link> link_of(const std::shared_ptr<page_cache>& cache) {
  if (!cache) throw error("vector index: no cache");
  return std::shared_ptr<controller_link>(cache, &cache->link());
}

dataset_request request_for(const std::string& path, const index_open_options& o) {
  return {path, false, o.direct_io, o.block_size};
}

}  // namespace

index_header read_index_header(const std::shared_ptr<controller_link>& link, const std::string& path,
                               const index_open_options& o) {
  if (!link) throw error("vector index: no link");
  return over_the_link(link, path, link->open_dataset(request_for(path, o))).header();
}

vector_index::vector_index(std::shared_ptr<page_cache> cache, const std::string& path, const index_open_options& o)
    : cache_(std::move(cache)),
      dataset_(link_of(cache_)->open_dataset(request_for(path, o))),
      file_(over_the_link(link_of(cache_), path, dataset_)) {
  codebook_ = file_.read_codebook();
  codes_ = file_.read_codes();
  labels_ = file_.read_labels();
  controller_link& link = cache_->link();
  section_request q;
  q.dataset = dataset_;
  q.offset = file_.section_at(index_section::records);
  q.bytes = file_.section_bytes(index_section::records);
  q.block_size = o.block_size;
  if (o.checked) {
    q.sums = sums_kind::fixed;
    q.sums_offset = file_.section_sums_at(index_section::records);
    q.sums_bytes = 4 * section_sum_count(q.bytes);
    q.sum_block = file_sum_block;
  }
  records_ = std::make_unique<array<uint8_t>>(cache_, link.open_section(q));
}

index_view vector_index::host_view() const {
  index_view v;
  v.h = header();
  v.records = records();
  v.codebook = codebook_.data();
  v.codes = codes_.data();
  v.labels = labels_.data();
  return v;
}

search_counts vector_index::search(const float* queries, uint64_t nq, const search_options& o, uint32_t* ids,
                                   float* distances, unsigned threads) const {
  const search_counts c = search_cpu(host_view(), queries, nq, o, ids, distances, threads);
  check_whole();
  return c;
}

void vector_index::check_whole() const {
  if (cache_->mapped_file_cut())
    throw data_error(file_.path() + ": the file was truncated while it was being read (records past its new end "
                                    "read as zeros): close the index and open it again");
}

}  // namespace deepwell::vectors
