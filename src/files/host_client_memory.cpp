// client_memory for CPU clients: plain host memory for both kinds.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/files/client_memory.hpp"

namespace deepwell {
namespace {

class host_client_memory final : public client_memory {
 public:
  ~host_client_memory() override {
    for (void* p : blocks_) std::free(p);
  }
  void* alloc_private(uint64_t bytes) override { return take(bytes); }
  void* alloc_shared(uint64_t bytes) override { return take(bytes); }
  void* client_address(void* shared) const override { return shared; }
  void read_private(void* dst, const void* src, uint64_t bytes) const override { std::memcpy(dst, src, bytes); }
  void write_private(void* dst, const void* src, uint64_t bytes) override {
    // Word by word with release: CPU clients read these words atomically.
    auto* d = static_cast<uint32_t*>(dst);
    const auto* s = static_cast<const uint32_t*>(src);
    for (uint64_t i = 0; i < bytes / 4; ++i) __atomic_store_n(d + i, s[i], __ATOMIC_RELEASE);
  }
  uint64_t zero_private_async(void* dst, uint32_t bytes) override {
    const uint32_t zeros[16] = {};
    if (bytes > sizeof zeros) throw error("client memory: zero_private_async of more than 64 bytes");
    write_private(dst, zeros, bytes);
    return 0;  // done already
  }
  void wait_private(uint64_t) override {}
  bool on_gpu() const override { return false; }

 private:
  void* take(uint64_t bytes) {
    const uint64_t n = (bytes + 127) / 128 * 128;
    void* p = std::aligned_alloc(128, n ? n : 128);
    if (!p) throw error("client memory: out of host memory for " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, n);
    blocks_.push_back(p);
    return p;
  }
  std::vector<void*> blocks_;
};

}  // namespace

std::unique_ptr<client_memory> make_host_client_memory() { return std::make_unique<host_client_memory>(); }

}  // namespace deepwell
