// A request made of pieces sent to several targets at once (a stripe's
// chunks, a flush of every member), completing when the last piece has:
// with its first error, or with the request's length. Pieces may complete
// on the issuing thread before issuing is over (host memory completes at
// once), so the issuer holds a reference of its own until issued().
#pragma once
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <new>

#include "deepwell/targets/io_engine.hpp"

namespace deepwell::detail {

// Bytes of [offset, offset + len) below `size`.
inline uint32_t bytes_inside(uint64_t offset, uint32_t len, uint64_t size) {
  if (offset >= size) return 0;
  return size - offset < len ? uint32_t(size - offset) : len;
}

class split_request {
 public:
  // One allocation for the request and its `pieces` pieces' contexts.
  static split_request* make(uint32_t pieces, int64_t result, io_callback done) {
    void* p = ::operator new(sizeof(split_request) + pieces * sizeof(piece_ctx));
    return new (p) split_request(pieces, result, done);
  }
  // The callback of the next piece, which must move `expect` bytes (0: a
  // flush, any result >= 0 is success).
  io_callback piece(uint32_t expect) {
    piece_ctx* c = pieces() + next_++;
    c->parent = this;
    c->expect = expect;
    return {&on_piece, c};
  }
  // Issuing is over: the issuer's reference goes.
  void issued() { drop(); }

 private:
  struct piece_ctx {
    split_request* parent;
    uint32_t expect;
  };
  split_request(uint32_t pieces, int64_t result, io_callback done) : left_(pieces + 1), result_(result), done_(done) {}
  piece_ctx* pieces() { return reinterpret_cast<piece_ctx*>(this + 1); }

  static void on_piece(void* ctx, int64_t r) {
    piece_ctx* c = static_cast<piece_ctx*>(ctx);
    split_request* s = c->parent;
    // A short transfer of a piece that is not the dataset's end is an
    // error, as for any target (target.hpp).
    const int64_t bad = r < 0 ? r : (c->expect && r != c->expect) ? -EIO : 0;
    if (bad) {
      int64_t none = 0;
      s->error_.compare_exchange_strong(none, bad, std::memory_order_relaxed);
    }
    s->drop();
  }

  void drop() {
    if (left_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    const int64_t e = error_.load(std::memory_order_relaxed);
    const int64_t result = e ? e : result_;
    const io_callback done = done_;
    this->~split_request();
    ::operator delete(this);
    done(result);
  }

  std::atomic<uint32_t> left_;
  std::atomic<int64_t> error_{0};
  int64_t result_;
  io_callback done_;
  uint32_t next_ = 0;
};

}  // namespace deepwell::detail
