// Whole extents in large buffered reads from several threads (bulk_read.hpp).
#include "common/unique_fd.hpp"
#include "deepwell/targets/bulk_read.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "deepwell/common/error.hpp"
#include "deepwell/common/host_mapping.hpp"

namespace deepwell {

bulk_read_report bulk_read(const std::string& path, const std::vector<file_extent>& extents, const bulk_read_options& o,
                           const extent_visitor& visit) {
  if (o.request_bytes == 0) throw error("bulk read of " + path + ": a request size of 0 bytes");
  const detail::opened_file file = detail::open_for_reading(path, "bulk read");
  const int fd = file.fd.get();
  const struct stat& st = file.st;
  // Every request, in file order: (extent, offset within it).
  std::vector<std::pair<size_t, uint64_t>> reqs;
  for (size_t e = 0; e < extents.size(); ++e) {
    const file_extent& x = extents[e];
    if (x.offset > uint64_t(st.st_size) || x.bytes > uint64_t(st.st_size) - x.offset)
      throw error("bulk read: extent [" + std::to_string(x.offset) + ", " + std::to_string(x.offset + x.bytes) +
                  ") is past the end of " + path + " (" + std::to_string(st.st_size) + " bytes)");
    ::posix_fadvise(fd, off_t(x.offset), off_t(x.bytes), POSIX_FADV_SEQUENTIAL);
    for (uint64_t at = 0; at < x.bytes; at += o.request_bytes) reqs.push_back({e, at});
  }
  std::sort(reqs.begin(), reqs.end(), [&](const auto& a, const auto& b) {
    return extents[a.first].offset + a.second < extents[b.first].offset + b.second;
  });
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const unsigned threads = unsigned(std::max<size_t>(
      1, std::min<size_t>(o.threads ? o.threads : std::clamp(cores, 4u, 16u), reqs.size())));
  bulk_read_report rep;
  rep.threads = threads;
  rep.requests = reqs.size();
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bytes{0};
  std::mutex m;
  std::exception_ptr first;
  auto fail = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> g(m);
    if (!first) first = e;
    stop = true;
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto work = [&] {
    std::unique_ptr<uint8_t[]> buf;
    try {
      buf.reset(new uint8_t[o.request_bytes]);
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    for (size_t i; !stop.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < reqs.size();) {
      const auto [e, at] = reqs[i];
      const uint64_t n = std::min(o.request_bytes, extents[e].bytes - at);
      uint64_t done = 0;
      while (done < n) {
        const ssize_t k = ::pread(fd, buf.get() + done, n - done, off_t(extents[e].offset + at + done));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
          const int err = k < 0 ? errno : 0;
          const std::string where = path + " at byte " + std::to_string(extents[e].offset + at + done);
          fail(std::make_exception_ptr(error(err ? errno_message("bulk read: " + where, err)
                                                 : "bulk read: " + where + ": the file ended early")));
          return;
        }
        done += uint64_t(k);
      }
      bytes += n;
      if (visit) {
        try {
          visit(e, at, buf.get(), n);
        } catch (...) {
          fail(std::current_exception());
          return;
        }
      }
    }
  };
  std::vector<std::thread> ts;
  for (unsigned t = 1; t < threads; ++t) ts.emplace_back(work);
  work();
  for (auto& t : ts) t.join();
  if (first) std::rethrow_exception(first);
  rep.bytes = bytes;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

uint64_t page_cache_room() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return uint64_t(kib) << 10;
}

double file_resident_share(const std::string& path, uint64_t offset, uint64_t bytes, uint64_t samples) {
  if (bytes == 0) return 1;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page, len = offset + bytes - start, pages = (len + page - 1) / page;
  void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, off_t(start));
  ::close(fd);
  if (p == MAP_FAILED) return 0;
  double share = 0;
  // In runs of 16 pages: a system call costs more than a page's look.
  constexpr uint64_t run = 16;
  if (samples == 0 || samples >= pages || pages < 2 * run) {
    share = resident_share(p, len);
  } else {
    const uint64_t runs = std::max<uint64_t>(1, samples / run), span = pages - run;
    uint64_t in = 0, seen = 0;
    unsigned char v[run];
    for (uint64_t i = 0; i < runs; ++i) {
      const uint64_t at = runs > 1 ? span * i / (runs - 1) : 0;
      if (::mincore(static_cast<uint8_t*>(p) + at * page, run * page, v) != 0) continue;
      for (unsigned char c : v) in += c & 1;
      seen += run;
    }
    share = seen ? double(in) / double(seen) : 0;
  }
  ::munmap(p, len);
  return share;
}

}  // namespace deepwell
