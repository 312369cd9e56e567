// The beam search on the GPU (search.hpp): a warp a query, its lookup
// table, query and candidate list in shared memory, its seen set and
// expanded nodes in device scratch, the records read through a GPU page
// cache (the next steps' pages prefetched while the warp computes), the
// codebook and codes in device memory. Gives the same ids and distances as
// search_cpu. Defined in src/vectors/search_gpu.cu (builds with CUDA).
#pragma once
#include <cstdint>
#include <memory>

#include "deepwell/vectors/index.hpp"

namespace deepwell::vectors {

class gpu_search {
 public:
  // `index` on a GPU page cache (its device current); copies the codebook
  // and the codes to that device. The index must outlive this object.
  explicit gpu_search(const vector_index& index);
  ~gpu_search();
  gpu_search(const gpu_search&) = delete;
  gpu_search& operator=(const gpu_search&) = delete;

  // Queries, ids and distances in host memory (nq x dim, nq x k, nq x k).
  // Throws naming the problem: bad options, a NaN in a query, a record the
  // cache could not read (deepwell::data_error, naming the node).
  search_counts search(const float* queries, uint64_t nq, const search_options& o, uint32_t* ids, float* distances);
  // The same with every pointer in device memory; the call returns when
  // the results are there.
  search_counts search_device(const float* queries, uint64_t nq, const search_options& o, uint32_t* ids,
                              float* distances);
  // Warps the last search ran (a query each at a time).
  uint64_t warps() const;

 private:
  struct state;
  std::unique_ptr<state> s_;
};

}  // namespace deepwell::vectors
