// How the file service's system calls scale with threads on this machine,
// without a GPU: N threads open (openat2 with RESOLVE_BENEATH, as the
// service does, or a plain openat), fstat and close every file of a tree,
// each thread with its own root descriptor. Prints one JSON line a run.
//   open_scaling_probe TREE [THREADS...]   (default 1 2 4 8)
// SPIN=N in the environment keeps N more threads spinning meanwhile (as
// the controller's pollers do), to see what they take from the opens.
// STREAM=N keeps N threads copying 64 MiB buffers meanwhile (as pollers
// copying file data into staging do: the last-level cache is flushed by
// them), to see what the opens lose when their dentries are not cached.
// Each run is also made a third way, "openat2_in_dir": beneath a
// descriptor of the file's directory (kept per thread), walking only the
// file's last component.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

int open_beneath(int root, const char* path) {
  open_how how{};
  how.flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  return int(::syscall(SYS_openat2, root, path, &how, sizeof how));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: open_scaling_probe TREE [THREADS...]\n");
    return 2;
  }
  const std::string tree = argv[1];
  std::vector<unsigned> counts;
  for (int i = 2; i < argc; ++i) counts.push_back(unsigned(std::atoi(argv[i])));
  if (counts.empty()) counts = {1, 2, 4, 8};
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (int k = 0, n = std::getenv("SPIN") ? std::atoi(std::getenv("SPIN")) : 0; k < n; ++k)
    spinners.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) __builtin_ia32_pause();
    });
  const int streams = std::getenv("STREAM") ? std::atoi(std::getenv("STREAM")) : 0;
  for (int k = 0; k < streams; ++k)
    spinners.emplace_back([&] {
      std::vector<char> a(64 << 20, 1), b(64 << 20);
      while (!stop.load(std::memory_order_relaxed)) std::memcpy(b.data(), a.data(), a.size());
    });
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(tree))
    if (e.is_regular_file() && !e.is_symlink()) files.push_back(std::filesystem::relative(e.path(), tree).string());
  for (int round = 0; round < 2; ++round)
    for (const int how : {0, 1, 2})
      for (const unsigned n : counts) {
        std::atomic<size_t> next{0};
        std::atomic<uint64_t> failed{0};
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> ts;
        for (unsigned k = 0; k < n; ++k)
          ts.emplace_back([&] {
            const int root = ::open(tree.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
            std::unordered_map<std::string, int> dirs;  // how 2: a descriptor per directory
            for (size_t i; (i = next.fetch_add(1)) < files.size();) {
              int fd;
              if (how == 2) {
                const size_t slash = files[i].rfind('/');
                const std::string dir = slash == std::string::npos ? "." : files[i].substr(0, slash);
                auto it = dirs.find(dir);
                if (it == dirs.end()) {
                  open_how oh{};
                  oh.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
                  oh.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
                  it = dirs.emplace(dir, int(::syscall(SYS_openat2, root, dir.c_str(), &oh, sizeof oh))).first;
                }
                fd = open_beneath(it->second, files[i].c_str() + (slash == std::string::npos ? 0 : slash + 1));
              } else {
                fd = how == 0 ? open_beneath(root, files[i].c_str())
                              : ::openat(root, files[i].c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
              }
              struct stat sb {};
              if (fd < 0 || ::fstat(fd, &sb) != 0) failed.fetch_add(1);
              if (fd >= 0) ::close(fd);
            }
            for (auto& [d, dfd] : dirs) ::close(dfd);
            ::close(root);
          });
        for (auto& t : ts) t.join();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("{\"spinning\":%zu,\"streaming\":%d,\"round\":%d,\"open\":\"%s\",\"threads\":%u,\"files\":%zu,\"seconds\":%.6f,\"files_per_s\":%.0f,"
                    "\"us_per_file_per_thread\":%.2f,\"failed\":%llu}\n",
                    spinners.size() - size_t(streams), streams, round, how == 0 ? "openat2_beneath" : how == 1 ? "openat" : "openat2_in_dir", n, files.size(), s, double(files.size()) / s,
                    s * 1e6 * n / double(files.size()), (unsigned long long)failed.load());
      }
  stop.store(true);
  for (auto& t : spinners) t.join();
  return 0;
}
