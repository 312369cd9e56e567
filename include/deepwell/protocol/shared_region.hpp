// Memory shared between a client and the controller: a memfd (so a server
// process and its clients can map the same pages), sealed against shrinking
// so no party can make another's mapping fault, mapped MAP_SHARED. A GPU
// client pins and maps it with cudaHostRegister (deepwell::gpu).
#pragma once
#include <cstddef>
#include <string>

namespace deepwell {

class shared_region {
 public:
  shared_region() = default;
  // Creates a zeroed region of `bytes` (rounded up to the page size). Its
  // inode is the creator's alone (mode 0600), so another user who is
  // handed a read-only descriptor cannot reopen it writable through
  // /proc/PID/fd. With `read_only_to_others`, it is also sealed against
  // every write but through this object's own mapping (F_SEAL_FUTURE_WRITE:
  // no descriptor of it, whoever holds it, can map it writable or write to
  // it); throws where the kernel cannot seal so (before Linux 5.1).
  static shared_region create(size_t bytes, const std::string& name, bool read_only_to_others = false);
  // Maps an existing memfd (from another process), checking its size.
  static shared_region map(int fd, size_t bytes);
  ~shared_region();
  shared_region(shared_region&& o) noexcept;
  shared_region& operator=(shared_region&& o) noexcept;
  shared_region(const shared_region&) = delete;
  shared_region& operator=(const shared_region&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }

 private:
  void reset();
  void* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace deepwell
