// `deepwell kv --gpu` in a build without CUDA (kv_gpu.hpp): require_gpu
// refuses first; these say the same if reached.
#include "deepwell/common/error.hpp"
#include "deepwell/controller/embedded.hpp"
#include "kv_gpu.hpp"

namespace deepwell::tools {

std::shared_ptr<page_cache> make_kv_gpu_cache(std::shared_ptr<controller_link>, const cache_config&) {
  throw error("this deepwell was built without CUDA: run kv without --gpu (CPU threads)");
}
std::shared_ptr<durable::kv_executor> make_kv_gpu_executor() {
  throw error("this deepwell was built without CUDA: run kv without --gpu (CPU threads)");
}

}  // namespace deepwell::tools
