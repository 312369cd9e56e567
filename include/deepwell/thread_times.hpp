#pragma once
// Where this process's host threads spent a stretch of time, from the
// kernel's per-thread scheduler statistics (/proc/self/task/*/schedstat):
// time on a CPU, and time runnable but waiting for one. A service whose
// system calls look slow may be waiting for a core, not in the kernel's
// code; this tells the two apart. Threads are grouped by name with a
// trailing "-N" dropped (dw-poller-3 -> dw-poller).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace deepwell {

struct thread_time {
  std::string name;           // the group: a thread name without its "-N"
  uint32_t threads = 0;       // of the group, alive at the end
  uint64_t cpu_ns = 0;        // on a CPU
  uint64_t runqueue_ns = 0;   // runnable, waiting for a CPU
  uint64_t slices = 0;        // times it was put on a CPU
};

// Takes a snapshot at construction; elapsed() gives each group's time
// since (threads started later count from zero). Empty where the kernel
// keeps no schedstat.
class thread_clock {
 public:
  thread_clock();
  std::vector<thread_time> elapsed() const;

 private:
  struct sample {
    uint64_t cpu_ns, runqueue_ns, slices;
  };
  std::map<int, sample> start_;
};

}  // namespace deepwell
