// `deepwell kv --gpu` where CUDA is built in (kv_gpu.hpp).
#include "deepwell/controller/embedded.hpp"
#include "kv_gpu.hpp"

namespace deepwell::tools {

std::shared_ptr<page_cache> make_kv_gpu_cache(std::shared_ptr<controller_link> link, const cache_config& cfg) {
  return make_gpu_page_cache(std::move(link), cfg);
}
std::shared_ptr<durable::kv_executor> make_kv_gpu_executor() { return durable::gpu_kv_support(); }

}  // namespace deepwell::tools
