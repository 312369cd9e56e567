#include "deepwell/vectors/index.hpp"

#include "deepwell/targets/file_sums.hpp"

namespace deepwell::vectors {

vector_index::vector_index(std::shared_ptr<page_cache> cache, const std::string& path, const index_open_options& o)
    : cache_(std::move(cache)), file_(path) {
  if (!cache_) throw error("vector index: no cache");
  codebook_ = file_.read_codebook();
  codes_ = file_.read_codes();
  controller_link& link = cache_->link();
  const uint32_t dataset = link.open_dataset({path, false, o.direct_io, o.block_size});
  section_request q;
  q.dataset = dataset;
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
  return v;
}

search_counts vector_index::search(const float* queries, uint64_t nq, const search_options& o, uint32_t* ids,
                                   float* distances, unsigned threads) const {
  return search_cpu(host_view(), queries, nq, o, ids, distances, threads);
}

}  // namespace deepwell::vectors
