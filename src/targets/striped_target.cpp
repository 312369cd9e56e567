// Striping (drive_array.hpp): a request split at chunk boundaries, each
// piece sent to its member on the calling poller's engine at once, so the
// members work in parallel, each in its own lane (member_lanes.hpp: a slow
// member holds back only its own requests); the request completes when its
// last piece has.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <tuple>

#include "deepwell/common/error.hpp"
#include "deepwell/targets/drive_array.hpp"
#include "targets/member_lanes.hpp"
#include "targets/split_request.hpp"

namespace deepwell {
namespace {

class striped_target final : public target {
 public:
  striped_target(std::vector<std::shared_ptr<target>> members, uint64_t chunk)
      : members_(std::move(members)), chunk_(chunk) {
    if (members_.empty()) throw error("striped target: no members");
    if (chunk_ < 512 || (chunk_ & (chunk_ - 1)))
      throw error("striped target: the chunk (" + std::to_string(chunk_) + " bytes) must be a power of two of at least 512");
    uint64_t smallest = UINT64_MAX;
    writable_ = true;
    for (size_t i = 0; i < members_.size(); ++i) {
      const auto& m = members_[i];
      if (!m) throw error("striped target: member " + std::to_string(i) + " is null");
      if (chunk_ % m->io_alignment())
        throw error("striped target: the chunk (" + std::to_string(chunk_) + " bytes) is not a multiple of member " +
                    std::to_string(i) + "'s I/O alignment (" + std::to_string(m->io_alignment()) + "): " + m->describe());
      if (m->size() < chunk_)
        throw error("striped target: member " + std::to_string(i) + " (" + m->describe() + ", " +
                    std::to_string(m->size()) + " bytes) is smaller than one chunk");
      smallest = std::min(smallest, m->size());
      writable_ = writable_ && m->writable();
      io_alignment_ = std::max(io_alignment_, m->io_alignment());
      memory_alignment_ = std::max(memory_alignment_, m->memory_alignment());
    }
    size_ = smallest / chunk_ * chunk_ * members_.size();
    lanes_ = std::make_unique<detail::member_lanes>(members_, detail::member_window(members_.size()));
  }

  uint64_t size() const override { return size_; }
  bool writable() const override { return writable_; }
  uint32_t io_alignment() const override { return io_alignment_; }
  uint32_t memory_alignment() const override { return memory_alignment_; }
  std::string describe() const override {
    std::string s = "stripe of " + std::to_string(members_.size()) + " (" + std::to_string(chunk_ >> 10) + " KiB chunks):";
    for (size_t i = 0; i < members_.size(); ++i) s += (i ? "; " : " ") + members_[i]->describe();
    return s;
  }

  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    const uint32_t inside = detail::bytes_inside(offset, len, size_);
    if (inside < len) std::memset(static_cast<uint8_t*>(buf) + inside, 0, len - inside);  // past the end: zeros
    issue(io, false, buf, len, inside, offset, false, done);
  }

  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) override {
    // Bytes past the end (a last partial block's padding) are dropped, as
    // a file's would be past its length.
    issue(io, true, const_cast<void*>(buf), len, detail::bytes_inside(offset, len, size_), offset, fua, done);
  }

  void flush(io_engine& io, io_callback done) override {
    auto* s = detail::split_request::make(uint32_t(members_.size()), 0, done);
    for (size_t m = 0; m < members_.size(); ++m) lanes_->flush(io, m, s->piece(0));
    s->issued();
  }

 private:
  // Member and offset there of dataset byte `b`.
  std::pair<size_t, uint64_t> locate(uint64_t b) const {
    const uint64_t c = b / chunk_;
    return {size_t(c % members_.size()), c / members_.size() * chunk_ + b % chunk_};
  }

  // [offset, offset + inside) goes to the members; the request reports len.
  void issue(io_engine& io, bool is_write, void* buf, uint32_t len, uint32_t inside, uint64_t offset, bool fua,
             io_callback done) {
    if (inside == 0) return done(len);
    auto [m, at] = locate(offset);
    if (inside == len && (offset % chunk_) + len <= chunk_) {  // one piece (a page inside a chunk): as it is
      if (is_write) return lanes_->write(io, m, buf, len, at, fua, done);
      return lanes_->read(io, m, buf, len, at, done);
    }
    const uint64_t first = offset / chunk_, last = (offset + inside - 1) / chunk_;
    auto* s = detail::split_request::make(uint32_t(last - first + 1), len, done);
    uint64_t b = offset;
    const uint64_t end = offset + inside;
    while (b < end) {
      const uint32_t n = uint32_t(std::min<uint64_t>(end, (b / chunk_ + 1) * chunk_) - b);
      std::tie(m, at) = locate(b);
      uint8_t* p = static_cast<uint8_t*>(buf) + (b - offset);
      if (is_write)
        lanes_->write(io, m, p, n, at, fua, s->piece(n));
      else
        lanes_->read(io, m, p, n, at, s->piece(n));
      b += n;
    }
    s->issued();
  }

  std::vector<std::shared_ptr<target>> members_;
  std::unique_ptr<detail::member_lanes> lanes_;
  uint64_t chunk_;
  uint64_t size_ = 0;
  bool writable_ = false;
  uint32_t io_alignment_ = 1, memory_alignment_ = 1;
};

}  // namespace

std::shared_ptr<target> make_striped_target(std::vector<std::shared_ptr<target>> members, uint64_t chunk_bytes) {
  return std::make_shared<striped_target>(std::move(members), chunk_bytes);
}

}  // namespace deepwell
