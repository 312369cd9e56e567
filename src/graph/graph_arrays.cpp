#include "deepwell/graph/graph_arrays.hpp"

#include "deepwell/targets/file_sums.hpp"

namespace deepwell::graph {

graph_arrays::graph_arrays(std::shared_ptr<page_cache> cache, const csr_file& f, const graph_dataset_options& o)
    : cache_(std::move(cache)), path_(f.path()), nodes_(f.nodes()) {
  if (!cache_) throw error("graph_arrays: no cache");
  if (f.header().id_bytes != 4) throw error(f.path() + ": graph algorithms need 4-byte node ids");
  if (o.check_offsets) f.check_offsets();
  controller_link& link = cache_->link();
  const uint32_t file = link.open_dataset({f.path(), false, o.direct_io, o.block_size});
  // Each section a namespace: in a version-2 file, checked against the
  // section's sums in the file, so that every page the cache reads is (a
  // bad block fails the read: the cache's last_error, which checked_runs
  // throws); a version-1 file's sections are read unchecked.
  const bool checked = f.checksummed() && o.checked;
  auto section = [&](csr_section s) {
    section_request q;
    q.dataset = file;
    q.offset = f.section_at(s);
    q.bytes = f.section_bytes(s);
    q.block_size = o.block_size;
    if (checked) {
      q.sums = sums_kind::fixed;
      q.sums_offset = f.section_sums_at(s);
      q.sums_bytes = 4 * section_sum_count(q.bytes);
      q.sum_block = file_sum_block;
    }
    return nsid_[int(s)] = link.open_section(q);
  };
  offsets_ = std::make_unique<array<uint64_t>>(cache_, section(csr_section::offsets));
  if (f.edges() == 0) throw error(f.path() + ": the graph has no edges");
  nbr_ = std::make_unique<array<uint32_t>>(cache_, section(csr_section::neighbours));
  if (f.header().weights != weight_type::none)
    wts_ = std::make_unique<array<uint32_t>>(cache_, section(csr_section::weights));
}

cached_graph graph_arrays::view(const uint64_t* offsets_in_memory, bool stream) const {
  cached_graph g;
  g.n = nodes_;
  g.offsets_mem = offsets_in_memory;
  g.offsets = offsets_->ref();
  g.nbr = nbr_->ref();
  if (wts_) g.wts = wts_->ref();
  if (stream) {
    g.nbr_stream = reinterpret_cast<const uint32_t*>(cache_->dataset(nbr_->ref().dataset).source.mapped());
    if (wts_) g.wts_stream = reinterpret_cast<const uint32_t*>(cache_->dataset(wts_->ref().dataset).source.mapped());
  }
  return g;
}

}  // namespace deepwell::graph
