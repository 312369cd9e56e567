#include "deepwell/graph/graph_arrays.hpp"

#include "deepwell/target.hpp"

namespace deepwell::graph {

graph_arrays::graph_arrays(controller& ctl, std::shared_ptr<page_cache> cache, const csr_file& f,
                           const graph_dataset_options& o)
    : cache_(std::move(cache)), nodes_(f.nodes()) {
  if (!cache_) throw error("graph_arrays: no cache");
  if (f.header().id_bytes != 4) throw error(f.path() + ": graph algorithms need 4-byte node ids");
  if (o.check_offsets) f.check_offsets();
  auto section = [&](uint64_t at, uint64_t bytes) {
    file_options fo;
    fo.direct = o.direct_io;
    fo.offset = at;
    fo.length = bytes;
    return ctl.add_namespace({open_file_target(f.path(), fo), o.block_size, true});
  };
  offsets_ = std::make_unique<array<uint64_t>>(cache_, section(f.header().offsets_at, f.offsets_bytes()));
  if (f.edges() == 0) throw error(f.path() + ": the graph has no edges");
  nbr_ = std::make_unique<array<uint32_t>>(cache_, section(f.header().neighbours_at, f.neighbours_bytes()));
  if (f.header().weights != weight_type::none)
    wts_ = std::make_unique<array<uint32_t>>(cache_, section(f.header().weights_at, f.weights_bytes()));
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
