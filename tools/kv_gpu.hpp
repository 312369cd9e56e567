// What `deepwell kv --gpu` needs from CUDA: a GPU page cache and the GPU
// executor of the store's batches. kv_gpu.cpp where CUDA is built in
// (deepwell_cuda), kv_gpu_nogpu.cpp (each throwing) where it is not, so
// kv_command.cpp builds the same either way.
#pragma once
#include <memory>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/durable/kv_store.hpp"

namespace deepwell::tools {

std::shared_ptr<page_cache> make_kv_gpu_cache(std::shared_ptr<controller_link> link, const cache_config& cfg);
std::shared_ptr<durable::kv_executor> make_kv_gpu_executor();

}  // namespace deepwell::tools
