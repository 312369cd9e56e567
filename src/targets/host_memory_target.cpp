// A dataset in host memory: requests are plain copies, completed before
// read()/write() return, so no engine work is involved.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "deepwell/common/detail/staging_copy.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/targets/target.hpp"

namespace deepwell {
namespace {

class host_memory_target final : public target {
 public:
  // `mapped_bytes` > 0: the memory is an anonymous mapping this target owns.
  host_memory_target(void* data, uint64_t bytes, bool writable, size_t mapped_bytes)
      : data_(static_cast<char*>(data)), size_(bytes), writable_(writable), mapped_bytes_(mapped_bytes) {}

  ~host_memory_target() override {
    if (mapped_bytes_) munmap(data_, mapped_bytes_);
  }

  uint64_t size() const override { return size_; }
  bool writable() const override { return writable_; }
  uint32_t io_alignment() const override { return 1; }
  uint32_t memory_alignment() const override { return 1; }
  std::string describe() const override {
    return "host memory (" + std::to_string(size_) + " bytes" + (writable_ ? "" : ", read-only") + ")";
  }
  void* host_pointer() const override { return data_; }

  void read(io_engine&, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    if (offset + len < offset) return done(-EINVAL);
    const uint64_t valid = offset < size_ ? std::min<uint64_t>(len, size_ - offset) : 0;
    if (valid) detail::copy_to_staging(buf, data_ + offset, valid);
    if (valid < len) std::memset(static_cast<char*>(buf) + valid, 0, len - valid);
    done(len);
  }

  void write(io_engine&, const void* buf, uint32_t len, uint64_t offset, bool, io_callback done) override {
    if (!writable_) return done(-EROFS);
    if (offset > size_ || len > size_ - offset) return done(-EINVAL);
    // Streamed: a write-back replaces whole blocks, so reading the old
    // lines in first (a plain store's read for ownership) is wasted work
    // on the poller, the controller's bottleneck for write-backs.
    if (len) detail::copy_streaming(data_ + offset, buf, len);
    done(len);
  }

  // Memory is as durable as it gets the moment the copy is done.
  void flush(io_engine&, io_callback done) override { done(0); }

 private:
  char* data_;
  uint64_t size_;
  bool writable_;
  size_t mapped_bytes_;
};

}  // namespace

std::shared_ptr<target> make_host_memory_target(uint64_t bytes, bool writable) {
  // An anonymous mapping is page-aligned and already zeroed, and the
  // kernel only backs the pages that are touched.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (bytes > SIZE_MAX - page) throw error("host memory target of " + std::to_string(bytes) + " bytes is too large");
  const size_t mapped = static_cast<size_t>(std::max<uint64_t>(bytes, 1) + page - 1) / page * page;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw error(errno_message("mapping " + std::to_string(bytes) + " bytes of host memory", errno));
  return std::make_shared<host_memory_target>(p, bytes, writable, mapped);
}

std::shared_ptr<target> wrap_host_memory(void* data, uint64_t bytes, bool writable) {
  if (!data && bytes) throw error("wrap_host_memory: null pointer for " + std::to_string(bytes) + " bytes");
  return std::make_shared<host_memory_target>(data, bytes, writable, 0);
}

}  // namespace deepwell
