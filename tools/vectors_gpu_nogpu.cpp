#include "deepwell/common/error.hpp"
#include "vectors_gpu.hpp"

namespace deepwell::tools {

namespace {
[[noreturn]] void none() { throw error("this deepwell was built without CUDA: search with --cpu"); }
}  // namespace

vectors::build_report build_vectors_on_gpu(const vectors::vector_set&, vectors::metric, const std::string&,
                                           const vectors::build_options&) {
  none();
}
std::shared_ptr<page_cache> make_vectors_gpu_cache(std::shared_ptr<controller_link>, const cache_config&) { none(); }
struct vectors_gpu_search::state {};
vectors_gpu_search::vectors_gpu_search(const vectors::vector_index&) { none(); }
vectors_gpu_search::~vectors_gpu_search() = default;
vectors::search_counts vectors_gpu_search::search(const float*, uint64_t, const vectors::search_options&, uint32_t*,
                                                  float*) {
  none();
}

}  // namespace deepwell::tools
