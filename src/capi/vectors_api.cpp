// The C ABI's vector search (include/deepwell/c/deepwell.h, dw_vectors_*):
// an index opened on a page cache of the handle's device (or a host cache
// for CPU clients), searched by GPU warps or CPU threads.
#include <cstddef>
#include <cmath>
#include <memory>
#include <string>

#include "deepwell/c/deepwell.h"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/vectors/build.hpp"
#include "deepwell/vectors/index.hpp"
#include "cache_options_c.hpp"
#include "guarded.hpp"
#include "server_links.hpp"
#include "sized_options.hpp"
#include "store_handle.hpp"

using namespace deepwell;

struct dw_vectors : capi::store_handle<vectors::vector_index> {
  std::shared_ptr<vectors::gpu_search> gpu;  // a GPU index's search (its device buffers)
  unsigned cpu_threads = 0;
  ~dw_vectors() {
    capi::device_guard g;
    try {
      g = capi::on_device(device);
    } catch (...) {  // freed all the same
    }
    gpu.reset();
  }
};

namespace {

using capi::guarded;
using capi::need;

constexpr const char* kind = "vector index";
dw_vectors& handle(dw_vectors* v) { return capi::handle_of(v, kind); }

cache_config vectors_cache_base() { return cache_config{}; }

}  // namespace

extern "C" {

void dw_vectors_build_options_init(dw_vectors_build_options* o) {
  if (!o) return;
  const vectors::build_options d;
  *o = dw_vectors_build_options{.size = uint32_t(sizeof(*o)), .degree = d.degree, .list = d.list, .passes = d.passes,
                                .pq_subspaces = d.pq_subspaces, .page_bytes = d.page_bytes, .threads = d.threads,
                                .alpha = d.alpha, .shard_vectors = d.shard_vectors};
}

int dw_vectors_build(const void* data, uint64_t count, uint32_t dim, int32_t type, int32_t metric, const char* path,
                     const dw_vectors_build_options* op, dw_vectors_build_info* info) {
  return guarded([&] {
    need(data != nullptr, "the vectors are a null pointer");
    need(path != nullptr && *path, "no path");
    need(type >= DW_VECTORS_F32 && type <= DW_VECTORS_U8, "type must be DW_VECTORS_F32, F16 or U8, not " + std::to_string(type));
    need(metric == DW_VECTORS_L2 || metric == DW_VECTORS_IP, "metric must be DW_VECTORS_L2 or IP, not " + std::to_string(metric));
    dw_vectors_build_options o;
    dw_vectors_build_options_init(&o);
    // Its first layout ended before shard_vectors: such a caller builds at once.
    if (op)
      o = capi::read_sized(op, dw_vectors_build_options_init, "dw_vectors_build_options",
                           offsetof(dw_vectors_build_options, shard_vectors));
    vectors::build_options b;
    if (o.degree) b.degree = o.degree;
    if (o.list) b.list = o.list;
    b.passes = o.passes;
    b.pq_subspaces = o.pq_subspaces;
    b.page_bytes = o.page_bytes;
    b.threads = o.threads;
    if (o.alpha != 0) b.alpha = o.alpha;
    b.shard_vectors = o.shard_vectors;
    const vectors::vector_set s{static_cast<const uint8_t*>(data), count, dim, vectors::vector_type(type)};
    const vectors::build_report r = vectors::build_index(s, vectors::metric(metric), path, b);
    if (info)
      *info = dw_vectors_build_info{.vectors = r.vectors, .edges = r.edges, .pq_subspaces = r.pq_subspaces,
                                    .quantiser_seconds = r.quantiser_seconds, .graph_seconds = r.graph_seconds,
                                    .write_seconds = r.write_seconds};
  });
}

void dw_vectors_options_init(dw_vectors_options* o) {
  if (!o) return;
  capi::init_sized(o, [] { return vectors_cache_base(); });
  o->cache.page_size = 0;  // the index's page, known at open
}

int dw_vectors_open(const dw_vectors_options* op, dw_vectors** out) {
  return guarded([&] {
    need(op != nullptr && out != nullptr, "null options or output pointer");
    *out = nullptr;
    const dw_vectors_options o = capi::read_sized(op, dw_vectors_options_init, "dw_vectors_options");
    need(o.path != nullptr && *o.path, "no path");
    const cache_options co = capi::from_c(o.cache);
    capi::check(co);
    auto v = std::make_unique<dw_vectors>();
    v->device = co.device;
    const std::string server = capi::current_server();
    v->link = server.empty() ? embedded_link(capi::controller_of(co)) : capi::server_link_to(server);
    vectors::index_open_options io;
    io.direct_io = co.odirect;
    // The header over the link first (the file may be a server's dataset
    // this process cannot open): the cache's page follows the index's.
    const uint32_t page = vectors::read_index_header(v->link, o.path, io).page_bytes;
    cache_config base = vectors_cache_base();
    base.page_size = page;
    cache_config cfg = co.applied_to(base);
    need(cfg.page_size >= page, "page_size " + std::to_string(cfg.page_size) + " is smaller than the index's pages (" +
                                    std::to_string(page) + ")");
    const capi::device_guard g = capi::on_device(v->device);
    v->cache = capi::cache_on(v->device, v->link, cfg);
    v->store = std::make_unique<vectors::vector_index>(v->cache, o.path, io);
    v->cpu_threads = co.cpu_threads;
    if (v->device >= 0) v->gpu = capi::gpu_vector_search(*v->store);
    *out = v.release();
  });
}

int dw_vectors_close(dw_vectors* v) { return capi::close_handle(v); }

int dw_vectors_info_get(dw_vectors* vp, dw_vectors_info* info) {
  return guarded([&] {
    need(info != nullptr, "info is a null pointer");
    const dw_vectors& v = handle(vp);
    const vectors::index_header& h = v.store->header();
    *info = dw_vectors_info{.count = h.count, .dim = h.dim, .type = int32_t(h.type), .metric = int32_t(h.distance),
                            .degree = h.degree, .page_bytes = h.page_bytes, .pq_subspaces = h.pq_subspaces,
                            .device = v.device, .records_bytes = h.records_bytes,
                            .cache_bytes = uint64_t(v.cache->slots()) * v.cache->page_size()};
  });
}

void dw_vectors_search_options_init(dw_vectors_search_options* o) {
  if (!o) return;
  const vectors::search_options d;
  *o = dw_vectors_search_options{.size = uint32_t(sizeof(*o)), .k = d.k, .list = d.list, .width = d.width,
                                 .max_expansions = d.max_expansions, .pages = DW_PAGES_NEARER,
                                 .entry_sample = d.entry_sample};
}

int dw_vectors_search_with(dw_vectors* vp, const float* queries, uint64_t nq, const dw_vectors_search_options* op,
                           int32_t on_device, uint32_t* ids, float* distances, dw_vectors_search_counts* counts) {
  return guarded([&] {
    dw_vectors& v = handle(vp);
    need(nq == 0 || (queries && ids && distances), "a null pointer among the queries, ids and distances");
    dw_vectors_search_options co;
    dw_vectors_search_options_init(&co);
    // Its first layout ended before entry_sample: such a caller gets the default.
    if (op)
      co = capi::read_sized(op, dw_vectors_search_options_init, "dw_vectors_search_options",
                            offsetof(dw_vectors_search_options, entry_sample));
    need(co.pages == DW_PAGES_NEARER || co.pages == DW_PAGES_ALL || co.pages == DW_PAGES_PICKED,
         "pages must be DW_PAGES_NEARER (0), DW_PAGES_ALL (1) or DW_PAGES_PICKED (2), not " + std::to_string(co.pages));
    vectors::search_options o;
    o.k = co.k;
    o.list = co.list;
    o.width = co.width;
    o.max_expansions = co.max_expansions;
    o.whole_pages = co.pages != DW_PAGES_PICKED;
    o.all_mates = co.pages == DW_PAGES_ALL;
    o.entry_sample = co.entry_sample;
    vectors::search_counts c;
    const capi::device_guard g = capi::on_device(v.device);
    need(!on_device || v.gpu != nullptr, "device memory given to an index on the CPU; open it with a CUDA device");
    if (v.gpu)
      c = capi::gpu_vector_search_run(*v.gpu, queries, nq, o, ids, distances, on_device != 0);
    else
      c = v.store->search(queries, nq, o, ids, distances, v.cpu_threads);
    if (counts)
      *counts = dw_vectors_search_counts{.expansions = c.expansions, .distances = c.distances, .bad_ids = c.bad_ids,
                                         .fetches = c.fetches, .page_mates = c.page_mates};
  });
}

int dw_vectors_search(dw_vectors* vp, const float* queries, uint64_t nq, uint32_t k, uint32_t list, uint32_t width,
                      int32_t on_device, uint32_t* ids, float* distances, dw_vectors_search_result* result) {
  dw_vectors_search_options o;
  dw_vectors_search_options_init(&o);
  o.k = k;
  if (list) o.list = list;
  if (width) o.width = width;
  dw_vectors_search_counts c{};
  const int rc = dw_vectors_search_with(vp, queries, nq, &o, on_device, ids, distances, &c);
  if (rc == 0 && result) *result = dw_vectors_search_result{.expansions = c.expansions, .distances = c.distances, .bad_ids = c.bad_ids};
  return rc;
}

}  // extern "C"
