// What `deepwell vectors build` and `search` need from CUDA: the GPU build,
// a GPU page cache and the GPU search. vectors_gpu.cpp where CUDA is built in, vectors_gpu_nogpu.cpp
// (each throwing) where it is not.
#pragma once
#include <memory>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/vectors/build.hpp"
#include "deepwell/vectors/index.hpp"

namespace deepwell::tools {

vectors::build_report build_vectors_on_gpu(const vectors::vector_set& data, vectors::metric m, const std::string& path,
                                           const vectors::build_options& o);

std::shared_ptr<page_cache> make_vectors_gpu_cache(std::shared_ptr<controller_link> link, const cache_config& cfg);

// A GPU search on an index opened on a GPU cache; search() as gpu_search's.
class vectors_gpu_search {
 public:
  explicit vectors_gpu_search(const vectors::vector_index& index);
  ~vectors_gpu_search();
  vectors::search_counts search(const float* queries, uint64_t nq, const vectors::search_options& o, uint32_t* ids,
                                float* distances);

 private:
  struct state;
  std::unique_ptr<state> s_;
};

}  // namespace deepwell::tools
