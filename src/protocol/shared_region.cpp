#include "deepwell/protocol/shared_region.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "deepwell/common/error.hpp"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010  // Linux 5.1; older C library headers lack it
#endif

namespace deepwell {

namespace {
size_t page_round(size_t n) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}
}  // namespace

shared_region shared_region::create(size_t bytes, const std::string& name, bool read_only_to_others) {
  shared_region r;
  r.size_ = page_round(bytes);
  r.fd_ = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (r.fd_ < 0) throw error(errno_message("memfd_create " + name, errno));
  // A memfd's inode is created 0777: anyone given a descriptor could
  // reopen it read-write through /proc. Only its owner may.
  if (fchmod(r.fd_, 0600) != 0) throw error(errno_message("fchmod memfd " + name, errno));
  if (ftruncate(r.fd_, off_t(r.size_)) != 0) {
    const int e = errno;
    // The file-size limit applies to memory files too: say so, not only
    // an internal name's "File too large".
    throw error(errno_message("shared memory of " + std::to_string(r.size_) + " bytes (" + name + ")", e) +
                (e == EFBIG ? ": past this process's file-size limit (ulimit -f), which memory files obey too" : ""));
  }
  // Sealed: nobody can shrink (SIGBUS for the others) or regrow it.
  if (fcntl(r.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
    throw error(errno_message("sealing memfd " + name, errno));
  r.data_ = mmap(nullptr, r.size_, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd_, 0);
  if (r.data_ == MAP_FAILED) {
    r.data_ = nullptr;
    throw error(errno_message("mmap of " + std::to_string(r.size_) + " bytes for " + name, errno));
  }
  // After our own writable mapping: the seal lets mappings made before it
  // keep writing, and refuses every later one.
  if (read_only_to_others && fcntl(r.fd_, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) != 0)
    throw error(errno_message("sealing memfd " + name + " against writes by others (F_SEAL_FUTURE_WRITE, Linux 5.1)", errno));
  if (fcntl(r.fd_, F_ADD_SEALS, F_SEAL_SEAL) != 0) throw error(errno_message("sealing memfd " + name, errno));
  return r;
}

shared_region shared_region::map(int fd, size_t bytes) {
  struct stat st{};
  if (fstat(fd, &st) != 0) throw error(errno_message("fstat of shared memory fd", errno));
  if (size_t(st.st_size) < bytes)
    throw error("shared memory fd holds " + std::to_string(st.st_size) + " bytes, expected at least " +
                std::to_string(bytes));
  shared_region r;
  r.fd_ = dup(fd);
  if (r.fd_ < 0) throw error(errno_message("dup of shared memory fd", errno));
  r.size_ = page_round(bytes);
  r.data_ = mmap(nullptr, r.size_, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd_, 0);
  if (r.data_ == MAP_FAILED) {
    r.data_ = nullptr;
    throw error(errno_message("mmap of shared memory fd", errno));
  }
  return r;
}

void shared_region::reset() {
  if (data_) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  fd_ = -1;
  size_ = 0;
}

shared_region::~shared_region() { reset(); }

shared_region::shared_region(shared_region&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), fd_(std::exchange(o.fd_, -1)) {}

shared_region& shared_region::operator=(shared_region&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

}  // namespace deepwell
