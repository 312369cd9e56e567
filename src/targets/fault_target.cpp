// Fault injection for tests: wraps a target and makes chosen requests fail,
// come back short, or arrive late. Test-only code, so one mutex guards the
// rules; it is held only while matching, never across a call to the inner
// target or a callback.
#include <cerrno>
#include <mutex>
#include <new>
#include <optional>
#include <vector>

#include "deepwell/targets/target.hpp"

namespace deepwell {
namespace {

class fault_target_impl final : public fault_target {
 public:
  explicit fault_target_impl(std::shared_ptr<target> inner) : inner_(std::move(inner)) {}

  void add_rule(const fault_rule& r) override {
    std::lock_guard lock(mutex_);
    rules_.push_back({r, r.count});
  }

  void clear_rules() override {
    std::lock_guard lock(mutex_);
    rules_.clear();
  }

  uint64_t fired() const override {
    std::lock_guard lock(mutex_);
    return fired_;
  }

  uint64_t size() const override { return inner_->size(); }
  bool writable() const override { return inner_->writable(); }
  uint32_t io_alignment() const override { return inner_->io_alignment(); }
  uint32_t memory_alignment() const override { return inner_->memory_alignment(); }
  std::string describe() const override { return "faults injected into " + inner_->describe(); }
  // No direct pointer, even over host memory: readers that bypassed the
  // controller would bypass the faults too.
  void* host_pointer() const override { return nullptr; }

  void read(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) override {
    if (take(fault_rule::raise, offset, len)) throw std::bad_alloc();
    if (auto d = take(fault_rule::delay, offset, len))
      return delay_then(io, d->delay_ns, {false, buf, len, offset, false, done});
    read_now(io, buf, len, offset, done);
  }

  void write(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua,
             io_callback done) override {
    if (take(fault_rule::raise, offset, len)) throw std::bad_alloc();
    auto d = take(fault_rule::delay, offset, len);
    if (!d) d = take(fault_rule::delay_write, offset, len);
    if (d) return delay_then(io, d->delay_ns, {true, const_cast<void*>(buf), len, offset, fua, done});
    write_now(io, buf, len, offset, fua, done);
  }

  void flush(io_engine& io, io_callback done) override {
    if (auto f = take(fault_rule::fail_flush, 0, UINT64_MAX)) return done(-errno_of(*f));
    inner_->flush(io, done);
  }

 private:
  struct active_rule {
    fault_rule rule;
    uint32_t remaining;  // firings left when rule.count > 0
  };

  // A read or write held back by a delay rule until its timer fires.
  struct delayed_request {
    bool is_write;
    void* buf;
    uint32_t len;
    uint64_t offset;
    bool fua;
    io_callback done;
  };
  struct pending_delay {
    fault_target_impl* self;
    io_engine* io;
    delayed_request req;
  };

  static int errno_of(const fault_rule& r) { return r.error > 0 ? r.error : EIO; }

  static bool overlaps(const fault_rule& r, uint64_t offset, uint64_t len) {
    const uint64_t rule_end = r.length > UINT64_MAX - r.offset ? UINT64_MAX : r.offset + r.length;
    const uint64_t req_end = len > UINT64_MAX - offset ? UINT64_MAX : offset + (len ? len : 1);
    return offset < rule_end && r.offset < req_end;
  }

  // The first live rule of `kind` overlapping the request, counted as fired.
  std::optional<fault_rule> take(fault_rule::kind_t kind, uint64_t offset, uint64_t len) {
    std::lock_guard lock(mutex_);
    for (auto& a : rules_) {
      if (a.rule.kind != kind || (a.rule.count > 0 && a.remaining == 0)) continue;
      if (kind != fault_rule::fail_flush && !overlaps(a.rule, offset, len)) continue;
      if (a.rule.count > 0) --a.remaining;
      ++fired_;
      return a.rule;
    }
    return std::nullopt;
  }

  // Short transfers: the inner target moves only half, and the callback
  // sees that real (short) count. No retry here: result < len is exactly
  // what the controller must recognise as a failed request.
  void read_now(io_engine& io, void* buf, uint32_t len, uint64_t offset, io_callback done) {
    if (auto f = take(fault_rule::fail_read, offset, len)) return done(-errno_of(*f));
    if (take(fault_rule::short_read, offset, len)) return inner_->read(io, buf, len / 2, offset, done);
    inner_->read(io, buf, len, offset, done);
  }

  void write_now(io_engine& io, const void* buf, uint32_t len, uint64_t offset, bool fua, io_callback done) {
    if (auto f = take(fault_rule::fail_write, offset, len)) return done(-errno_of(*f));
    if (take(fault_rule::short_write, offset, len)) return inner_->write(io, buf, len / 2, offset, fua, done);
    inner_->write(io, buf, len, offset, fua, done);
  }

  void delay_then(io_engine& io, uint64_t delay_ns, const delayed_request& req) {
    io_op op;
    op.kind = io_op::timer;
    op.delay_ns = delay_ns;
    op.done = {&on_delay_over, new pending_delay{this, &io, req}};
    io.queue(op);
  }

  static void on_delay_over(void* ctx, int64_t result) {
    pending_delay* p = static_cast<pending_delay*>(ctx);
    pending_delay d = *p;
    delete p;
    if (result < 0) return d.req.done(result);
    if (d.req.is_write)
      d.self->write_now(*d.io, d.req.buf, d.req.len, d.req.offset, d.req.fua, d.req.done);
    else
      d.self->read_now(*d.io, d.req.buf, d.req.len, d.req.offset, d.req.done);
  }

  std::shared_ptr<target> inner_;
  mutable std::mutex mutex_;
  std::vector<active_rule> rules_;
  uint64_t fired_ = 0;
};

}  // namespace

std::shared_ptr<fault_target> make_fault_target(std::shared_ptr<target> inner) {
  return std::make_shared<fault_target_impl>(std::move(inner));
}

}  // namespace deepwell
