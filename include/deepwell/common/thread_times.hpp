#pragma once
// Where this process's host threads spent a stretch of time, from the
// kernel's per-thread scheduler statistics (/proc/self/task/*/schedstat):
// time on a CPU, and time runnable but waiting for one. A service whose
// system calls look slow may be waiting for a core, not in the kernel's
// code; this tells the two apart. Threads are grouped by name with a
// trailing "-N" dropped (dw-poller-3 -> dw-poller).
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace deepwell {

struct thread_time {
  std::string name;           // the group: a thread name without its "-N"
  uint32_t threads = 0;       // of the group, alive at the end
  uint64_t cpu_ns = 0;        // on a CPU
  uint64_t runqueue_ns = 0;   // runnable, waiting for a CPU
  uint64_t slices = 0;        // times it was put on a CPU
};

// Names a thread for top -H and thread_clock's groups (Linux keeps 15
// characters: longer names are cut, never refused).
void name_thread(std::thread& t, const std::string& name);

// The whole machine's CPU time by kind (/proc/stat's first line), in
// seconds summed over CPUs. `steal` is time the hypervisor gave a virtual
// CPU's turn to someone else: threads that look on a CPU but make no
// progress.
struct machine_cpu_time {
  double user = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  static machine_cpu_time now();
  machine_cpu_time operator-(const machine_cpu_time& o) const;
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

// A poor man's off-CPU profile: while it lives, a thread looks at every
// thread of this process in the group `group` (a name without its "-N",
// as thread_time's) every `period_us`
// and counts what it finds: "running" (on a CPU or runnable), or where in
// the kernel it sleeps (the top frames of /proc/self/task/T/stack and the
// system call they are in; the stack needs root, else its wchan). Tells a service blocked in a system call
// from one busy in it.
class thread_sampler {
 public:
  // `callers`: also name up to that many code addresses found on a
  // sleeping thread's user stack ("module+0xOFFSET", for addr2line).
  thread_sampler(std::string group, unsigned period_us = 200, unsigned frames = 3, unsigned callers = 0);
  ~thread_sampler();
  thread_sampler(const thread_sampler&) = delete;
  thread_sampler& operator=(const thread_sampler&) = delete;
  // Stops sampling; what was seen, by state or stack, most often first.
  std::vector<std::pair<std::string, uint64_t>> stop();

 private:
  void run();
  std::string group_;
  unsigned period_us_, frames_, callers_;
  std::atomic<bool> stop_{false};
  std::map<std::string, uint64_t> seen_;
  std::thread thread_;
};

}  // namespace deepwell
