// A few threads that run fn(i) for every i in [0, n) with the caller's,
// returning when all are done: how the server makes several system calls
// at once (a batch's opens, several clients' batches) without a thread per
// call. One batch at a time: a caller that finds the helpers busy with
// another caller's batch runs its own alone, since the callers are then
// already running in parallel and waiting would only serialise them.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

namespace deepwell::detail {

class fork_join {
 public:
  // helpers: threads besides the caller's (0: the caller does everything).
  explicit fork_join(unsigned helpers);
  ~fork_join();
  fork_join(const fork_join&) = delete;
  fork_join& operator=(const fork_join&) = delete;

  void run(uint32_t n, const std::function<void(uint32_t)>& fn);
  unsigned helpers() const;

  // Half the machine's cores less the caller's, 1 to 7: enough to overlap
  // system calls that wait, not so many that they crowd the pollers.
  static unsigned default_helpers();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace deepwell::detail
