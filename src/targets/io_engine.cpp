// Choosing an io_engine: the io_uring probe, DEEPWELL_IO, and the factory.
#include <liburing.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "deepwell/common/defaults.hpp"
#include "deepwell/common/detail/log.hpp"
#include "deepwell/common/error.hpp"
#include "targets/io_engines.hpp"

namespace deepwell {

bool io_uring_available() {
  // io_uring can be missing (old kernel), disabled (io_uring_disabled
  // sysctl) or blocked (seccomp profiles of container runtimes): setting up
  // a tiny ring tells all three apart from "works". The answer cannot
  // change while the process runs, so it is computed once.
  static const bool available = [] {
    io_uring ring{};
    if (io_uring_queue_init(2, &ring, 0) < 0) return false;
    io_uring_queue_exit(&ring);
    return true;
  }();
  return available;
}

io_backend backend_from_env() {
  const std::string s = defaults::io_backend();
  return s == "uring" ? io_backend::uring : s == "threads" ? io_backend::threads : io_backend::automatic;
}

std::unique_ptr<io_engine> make_io_engine(io_backend backend, unsigned queue_depth) {
  switch (backend) {
    case io_backend::uring:
      if (!io_uring_available())
        throw error("the io_uring I/O backend was asked for, but io_uring is not available in this "
                    "process (kernel too old, io_uring_disabled sysctl, or a seccomp profile); "
                    "use the threads backend (DEEPWELL_IO=threads)");
      return detail::make_uring_engine(queue_depth);
    case io_backend::threads:
      return detail::make_thread_engine(queue_depth);
    case io_backend::automatic:
      break;
  }
  std::string why = "io_uring is not available in this process (kernel too old, io_uring_disabled sysctl, or a "
                    "seccomp profile)";
  if (io_uring_available()) {
    // A ring can still fail where the tiny probe worked (before Linux 5.12
    // ring memory counts against RLIMIT_MEMLOCK): fall back rather than fail.
    try {
      return detail::make_uring_engine(queue_depth);
    } catch (const error& e) {
      why = std::string("an io_uring ring could not be made: ") + e.what();
    }
  }
  // Said once a process: the fallback is slower for many small requests.
  static std::once_flag told;
  std::call_once(told, [&] {
    detail::log_line(detail::log_level::warn, why + "; I/O runs on the threads backend instead (DEEPWELL_IO=threads "
                                                    "chooses it and says nothing)");
  });
  return detail::make_thread_engine(queue_depth);
}

}  // namespace deepwell
