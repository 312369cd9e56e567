// Read-only MAP_SHARED file mappings whose file may be cut short under
// them (truncated by another process or handle). Reading a page past the
// file's new end raises SIGBUS, which would end the process. Inside a
// guarded range the handler maps a page of zeros there instead and marks
// the range cut: the read completes, and the call that made it reports
// the truncation by the file's name (Java's MappedByteBuffer turns the
// same fault into an error). Any other SIGBUS goes to the handler that was
// installed before, or to the default (the process ends as it would have).
#pragma once
#include <cstdint>

namespace deepwell::detail {

// Guards [base, base + bytes); a slot for the calls below, or -1 where
// every slot is taken (the range is then unguarded, as before).
int guard_mapping(const void* base, uint64_t bytes);
// Before the range is unmapped.
void unguard_mapping(int slot);
// Whether a read in the range found the file cut short (sticky: the
// zero pages stay until the mapping goes).
bool mapping_cut(int slot);

}  // namespace deepwell::detail

namespace deepwell::detail {

// A guard held beside a mapping (declared after it, so that it goes first).
class guarded_range {
 public:
  guarded_range() = default;
  guarded_range(const void* base, uint64_t bytes) : slot_(guard_mapping(base, bytes)) {}
  ~guarded_range() { unguard_mapping(slot_); }
  guarded_range(const guarded_range&) = delete;
  guarded_range& operator=(const guarded_range&) = delete;
  guarded_range(guarded_range&& o) noexcept : slot_(o.slot_) { o.slot_ = -1; }
  guarded_range& operator=(guarded_range&& o) noexcept {
    if (this != &o) {
      unguard_mapping(slot_);
      slot_ = o.slot_;
      o.slot_ = -1;
    }
    return *this;
  }
  bool cut() const { return mapping_cut(slot_); }

 private:
  int slot_ = -1;
};

}  // namespace deepwell::detail
