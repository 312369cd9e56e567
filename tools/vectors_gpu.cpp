#include "vectors_gpu.hpp"

#include "deepwell/controller/embedded.hpp"
#include "deepwell/vectors/gpu_build.hpp"
#include "deepwell/vectors/gpu_search.hpp"

namespace deepwell::tools {

vectors::build_report build_vectors_on_gpu(const vectors::vector_set& data, vectors::metric m, const std::string& path,
                                           const vectors::build_options& o) {
  return vectors::build_index_on_gpu(data, m, path, o);
}

std::shared_ptr<page_cache> make_vectors_gpu_cache(std::shared_ptr<controller_link> link, const cache_config& cfg) {
  return make_gpu_page_cache(std::move(link), cfg);
}

struct vectors_gpu_search::state {
  vectors::gpu_search s;
  explicit state(const vectors::vector_index& i) : s(i) {}
};
vectors_gpu_search::vectors_gpu_search(const vectors::vector_index& index) : s_(std::make_unique<state>(index)) {}
vectors_gpu_search::~vectors_gpu_search() = default;
vectors::search_counts vectors_gpu_search::search(const float* queries, uint64_t nq, const vectors::search_options& o,
                                                  uint32_t* ids, float* distances) {
  return s_->s.search(queries, nq, o, ids, distances);
}

}  // namespace deepwell::tools
