// thread_clock: /proc/self/task/*/schedstat, grouped by thread name.
#include "deepwell/thread_times.hpp"

#include <dirent.h>

#include <cctype>
#include <cstdio>
#include <fstream>

namespace deepwell {
namespace {

struct task {
  int tid;
  std::string name;
  uint64_t cpu_ns, runqueue_ns, slices;
};

std::vector<task> read_tasks() {
  std::vector<task> out;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    const std::string dir = std::string("/proc/self/task/") + e->d_name;
    task t{std::atoi(e->d_name), {}, 0, 0, 0};
    std::ifstream st(dir + "/schedstat");
    if (!(st >> t.cpu_ns >> t.runqueue_ns >> t.slices)) continue;  // gone, or no schedstat
    std::ifstream comm(dir + "/comm");
    std::getline(comm, t.name);
    // dw-poller-3 -> dw-poller; a name of digits only stays as it is.
    size_t cut = t.name.size();
    while (cut > 0 && std::isdigit(static_cast<unsigned char>(t.name[cut - 1]))) --cut;
    if (cut > 1 && cut < t.name.size() && t.name[cut - 1] == '-') t.name.resize(cut - 1);
    out.push_back(std::move(t));
  }
  ::closedir(d);
  return out;
}

}  // namespace

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

}  // namespace deepwell
