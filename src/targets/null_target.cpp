// A target that moves no data: reads and writes complete at once. It
// measures the controller's own cost per request (the block benchmark's
// "null" location).
#include <memory>

#include "deepwell/targets/target.hpp"

namespace deepwell {

namespace {
class null_target final : public target {
 public:
  explicit null_target(uint64_t bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_; }
  bool writable() const override { return true; }
  uint32_t io_alignment() const override { return 1; }
  uint32_t memory_alignment() const override { return 1; }
  std::string describe() const override { return "null target of " + std::to_string(bytes_) + " bytes"; }
  void read(io_engine&, void*, uint32_t len, uint64_t, io_callback done) override { done(len); }
  void write(io_engine&, const void*, uint32_t len, uint64_t, bool, io_callback done) override { done(len); }
  void flush(io_engine&, io_callback done) override { done(0); }

 private:
  uint64_t bytes_;
};
}  // namespace

std::shared_ptr<target> make_null_target(uint64_t bytes) { return std::make_shared<null_target>(bytes); }

}  // namespace deepwell
