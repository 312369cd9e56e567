// A byte range of another target (make_slice_target in target.hpp).
#include <cerrno>
#include <cstring>

#include "deepwell/common/error.hpp"
#include "deepwell/targets/target.hpp"

namespace deepwell {

namespace {

// A read that runs past the slice's end: the tail is zeroed when it completes.
struct tail_read {
  uint8_t* buf;
  uint32_t len, valid;  // bytes asked for, and those inside the slice
  io_callback done;

  static void finish(void* ctx, int64_t result) {
    auto* r = static_cast<tail_read*>(ctx);
    const io_callback done = r->done;
    int64_t got = result;
    if (result >= 0) {
      std::memset(r->buf + r->valid, 0, r->len - r->valid);
      // A short read of the part inside the slice is a short read.
      got = result >= int64_t(r->valid) ? int64_t(r->len) : result;
    }
    delete r;
    done(got);
  }
};

class slice_target final : public target {
 public:
  slice_target(std::shared_ptr<target> inner, uint64_t offset, uint64_t length, bool writable)
      : inner_(std::move(inner)), offset_(offset), length_(length), writable_(writable && inner_->writable()) {}
  uint64_t size() const override { return length_; }
  bool writable() const override { return writable_; }
  uint32_t io_alignment() const override { return inner_->io_alignment(); }
  uint32_t memory_alignment() const override { return inner_->memory_alignment(); }
  std::string describe() const override {
    return "bytes " + std::to_string(offset_) + "+" + std::to_string(length_) + " of " + inner_->describe();
  }
  std::shared_ptr<host_mapping> map_readonly() const override { return inner_->map_range(offset_, length_); }
  std::shared_ptr<host_mapping> map_range(uint64_t offset, uint64_t bytes) const override {
    if (offset > length_ || bytes > length_ - offset) return nullptr;
    return inner_->map_range(offset_ + offset, bytes);
  }

  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    if (offset >= length_) {
      std::memset(buf, 0, len);
      return done(len);
    }
    if (len <= length_ - offset) return inner_->read(io, buf, len, offset_ + offset, std::move(done));
    // The request is aligned (the caller's duty), so reading all of it from
    // inner keeps O_DIRECT's alignment; the bytes past the slice are then
    // zeroed rather than handed out.
    auto* r = new tail_read{static_cast<uint8_t*>(buf), len, uint32_t(length_ - offset), std::move(done)};
    inner_->read(io, buf, len, offset_ + offset, {&tail_read::finish, r});
  }
  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override {
    if (!writable_) return done(-EROFS);
    if (offset > length_ || len > length_ - offset) return done(-ENOSPC);
    inner_->write(io, buf, len, offset_ + offset, fua, std::move(done));
  }
  void flush(io_engine& io, io_callback done) override { inner_->flush(io, std::move(done)); }

 private:
  std::shared_ptr<target> inner_;
  uint64_t offset_, length_;
  bool writable_;
};

}  // namespace

std::shared_ptr<target> make_slice_target(std::shared_ptr<target> inner, uint64_t offset, uint64_t length,
                                          bool writable) {
  if (!inner) throw error("slice: no target");
  const uint64_t size = inner->size();
  if (length == 0 || offset > size || length > size - offset)
    throw error("bytes " + std::to_string(offset) + "+" + std::to_string(length) + " are not inside " +
                inner->describe() + " (" + std::to_string(size) + " bytes)");
  const uint32_t align = inner->io_alignment();
  if (align > 1 && offset % align != 0)
    throw error("bytes " + std::to_string(offset) + "+" + std::to_string(length) + " of " + inner->describe() +
                ": the offset is not a multiple of its direct-I/O alignment " + std::to_string(align));
  return std::make_shared<slice_target>(std::move(inner), offset, length, writable);
}

}  // namespace deepwell
