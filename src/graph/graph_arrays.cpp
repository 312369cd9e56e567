#include "deepwell/graph/graph_arrays.hpp"

#include "deepwell/file_sums.hpp"
#include "deepwell/target.hpp"

namespace deepwell::graph {

graph_arrays::graph_arrays(controller& ctl, std::shared_ptr<page_cache> cache, const csr_file& f,
                           const graph_dataset_options& o)
    : cache_(std::move(cache)), path_(f.path()), nodes_(f.nodes()) {
  if (!cache_) throw error("graph_arrays: no cache");
  if (f.header().id_bytes != 4) throw error(f.path() + ": graph algorithms need 4-byte node ids");
  if (o.check_offsets) f.check_offsets();
  // Each section a namespace: in a version-2 file, its file target checked
  // against the section's sums, so that every page the cache reads is (a
  // bad block fails the read: the cache's last_error, which checked_runs
  // throws); a version-1 file's sections are read unchecked.
  const bool checked = f.checksummed() && o.checked;
  auto section = [&](csr_section s) {
    file_options fo;
    fo.direct = o.direct_io;
    fo.offset = f.section_at(s);
    fo.length = f.section_bytes(s);
    std::shared_ptr<target> t = open_file_target(f.path(), fo);
    if (checked) t = checked_section(std::move(t), f.section_sums(s));
    return ctl.add_namespace({std::move(t), o.block_size, true});
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
    g.nbr_stream = reinterpret_cast<const uint32_t*>(cache_->dataset(nbr_->ref().dataset).direct);
    if (wts_) g.wts_stream = reinterpret_cast<const uint32_t*>(cache_->dataset(wts_->ref().dataset).direct);
  }
  return g;
}

}  // namespace deepwell::graph
