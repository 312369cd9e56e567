// thread_clock: /proc/self/task/*/schedstat, grouped by thread name.
#include "deepwell/common/thread_times.hpp"

#include <dirent.h>
#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace deepwell {
namespace {

// dw-poller-3 -> dw-poller; a name of digits only stays as it is.
std::string group_of(std::string name) {
  size_t cut = name.size();
  while (cut > 0 && std::isdigit(static_cast<unsigned char>(name[cut - 1]))) --cut;
  if (cut > 1 && cut < name.size() && name[cut - 1] == '-') name.resize(cut - 1);
  return name;
}

struct exec_map {
  uint64_t lo, hi, off;
  std::string path;  // its file's name
};

struct task {
  int tid;
  std::string name;
  uint64_t cpu_ns, runqueue_ns, slices;
};

// Calls f(tid, "/proc/self/task/TID", group) for each thread of this
// process.
template <class F>
void for_each_task(F&& f) {
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    const std::string dir = std::string("/proc/self/task/") + e->d_name;
    std::string name;
    std::getline(std::ifstream(dir + "/comm"), name);
    f(std::atoi(e->d_name), dir, group_of(name));
  }
  ::closedir(d);
}

std::vector<task> read_tasks() {
  std::vector<task> out;
  for_each_task([&](int tid, const std::string& dir, const std::string& group) {
    task t{tid, group, 0, 0, 0};
    std::ifstream st(dir + "/schedstat");
    if (st >> t.cpu_ns >> t.runqueue_ns >> t.slices) out.push_back(std::move(t));  // else gone, or no schedstat
  });
  return out;
}

// The executable mappings of this process: where a return address is.
std::vector<exec_map> read_exec_maps() {
  std::vector<exec_map> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long lo, hi, off;
    char perms[8] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %*s %*s %n", &lo, &hi, perms, &off, &path_at) < 4) continue;
    if (perms[2] != 'x' || path_at <= 0 || size_t(path_at) >= line.size()) continue;
    std::string path = line.substr(size_t(path_at));
    const size_t slash = path.rfind('/');
    if (slash != std::string::npos) path = path.substr(slash + 1);
    out.push_back({lo, hi, off, path});
  }
  return out;
}

// A sleeping thread's user stack, scanned for words that point into code:
// return addresses (and some stale ones), innermost first, as
// "module+0xFILEOFFSET" (addr2line -e MODULE takes the offset where the
// module's code is mapped at its file offset, as with PIE executables).
// libc's are skipped: its system call wrappers say nothing.
std::string user_callers(const std::string& dir, const std::vector<exec_map>& maps, unsigned want) {
  std::string sys;
  std::getline(std::ifstream(dir + "/syscall"), sys);
  // "NR arg1 ... arg6 SP PC" while in a system call.
  std::istringstream in(sys);
  std::vector<std::string> f;
  for (std::string w; in >> w;) f.push_back(w);
  if (f.size() < 9) return {};
  uint64_t sp = 0;
  try {
    sp = std::stoull(f[7], nullptr, 16);
  } catch (const std::exception&) {
    return {};  // not the format read above
  }
  uint64_t words[512];
  iovec local{words, sizeof words}, remote{reinterpret_cast<void*>(sp), sizeof words};
  ssize_t got = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
  if (got <= 0) {  // near the stack's top: less
    local.iov_len = remote.iov_len = 512;
    got = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
  }
  std::string out;
  for (ssize_t i = 0, found = 0; i < got / 8 && found < want; ++i)
    for (const exec_map& m : maps)
      if (words[i] >= m.lo && words[i] < m.hi) {
        if (m.path.compare(0, 5, "libc.") == 0 || m.path.compare(0, 5, "libc-") == 0) break;
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s%s+0x%llx", out.empty() ? "" : " < ", m.path.c_str(),
                      (unsigned long long)(words[i] - m.lo + m.off));
        out += buf;
        ++found;
        break;
      }
  return out;
}

}  // namespace

void name_thread(std::thread& t, const std::string& name) {
  pthread_setname_np(t.native_handle(), name.substr(0, 15).c_str());
}

machine_cpu_time machine_cpu_time::now() {
  machine_cpu_time t;
  std::ifstream st("/proc/stat");
  std::string cpu;
  unsigned long long v[8] = {};  // user nice system idle iowait irq softirq steal (clock ticks)
  if (!(st >> cpu) || cpu != "cpu") return t;
  for (auto& x : v) st >> x;
  const double tick = 1.0 / double(::sysconf(_SC_CLK_TCK));
  t.user = double(v[0] + v[1]) * tick;
  t.system = double(v[2]) * tick;
  t.idle = double(v[3]) * tick;
  t.iowait = double(v[4]) * tick;
  t.irq = double(v[5]) * tick;
  t.softirq = double(v[6]) * tick;
  t.steal = double(v[7]) * tick;
  return t;
}

machine_cpu_time machine_cpu_time::operator-(const machine_cpu_time& o) const {
  return {user - o.user, system - o.system, idle - o.idle, iowait - o.iowait, irq - o.irq, softirq - o.softirq, steal - o.steal};
}

thread_clock::thread_clock() {
  for (const task& t : read_tasks()) start_[t.tid] = {t.cpu_ns, t.runqueue_ns, t.slices};
}

std::vector<thread_time> thread_clock::elapsed() const {
  std::map<std::string, thread_time> by;
  for (const task& t : read_tasks()) {
    sample s{0, 0, 0};
    if (auto it = start_.find(t.tid); it != start_.end()) s = it->second;
    thread_time& g = by[t.name];
    g.name = t.name;
    ++g.threads;
    g.cpu_ns += t.cpu_ns - s.cpu_ns;
    g.runqueue_ns += t.runqueue_ns - s.runqueue_ns;
    g.slices += t.slices - s.slices;
  }
  std::vector<thread_time> out;
  for (auto& [name, g] : by) out.push_back(g);
  return out;
}

thread_sampler::thread_sampler(std::string group, unsigned period_us, unsigned frames, unsigned callers)
    : group_(std::move(group)), period_us_(std::max(1u, period_us)), frames_(std::max(1u, frames)), callers_(callers) {
  thread_ = std::thread([this] { run(); });
}

thread_sampler::~thread_sampler() { stop(); }

std::vector<std::pair<std::string, uint64_t>> thread_sampler::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  std::vector<std::pair<std::string, uint64_t>> out(seen_.begin(), seen_.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

void thread_sampler::run() {
  const std::vector<exec_map> maps = read_exec_maps();
  while (!stop_.load(std::memory_order_relaxed)) {
    for_each_task([&](int, const std::string& dir, const std::string& group) {
      if (group != group_) return;
      // stat: "tid (comm) S ...": the state follows the last ')'.
      std::string stat;
      std::getline(std::ifstream(dir + "/stat"), stat);
      const size_t paren = stat.rfind(')');
      const char state = paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : '?';
      if (state == 'R') {
        ++seen_["running"];
        return;
      }
      // "[<0>] hrtimer_nanosleep+0xb5/0x130": the function names, offsets
      // cut; the first frames, and the system call they are in.
      std::ifstream st(dir + "/stack");
      std::string line, where, call;
      for (unsigned k = 0; std::getline(st, line);) {
        const size_t b = line.find("] "), plus = line.find('+');
        if (b == std::string::npos) continue;
        const std::string fn = line.substr(b + 2, plus == std::string::npos ? std::string::npos : plus - b - 2);
        if (k++ < frames_) where += (where.empty() ? "" : " < ") + fn;
        if (call.empty() && fn.compare(0, 10, "__x64_sys_") == 0) call = fn.substr(10);
      }
      if (!call.empty()) where += " @ " + call;
      if (where.empty()) std::getline(std::ifstream(dir + "/wchan"), where);
      if (callers_) {
        const std::string user = user_callers(dir, maps, callers_);
        if (!user.empty()) where += " | " + user;
      }
      ++seen_[std::string(1, state) + ": " + (where.empty() ? "?" : where)];
    });
    std::this_thread::sleep_for(std::chrono::microseconds(period_us_));
  }
}

}  // namespace deepwell
