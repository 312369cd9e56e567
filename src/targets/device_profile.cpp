// A storage device's profile: parsed, cached, or measured by a short
// O_DIRECT probe (device_profile.hpp).
#include "deepwell/targets/device_profile.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "deepwell/common/defaults.hpp"
#include "deepwell/common/detail/log.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/common/size_text.hpp"

namespace deepwell {
namespace {

constexpr uint64_t probe_min_bytes = 64ull << 20;
constexpr uint32_t probe_read_bytes = 4096;
constexpr uint32_t probe_depth = 64;
constexpr uint64_t probe_seq_request = 8ull << 20;
constexpr unsigned probe_seq_threads = 8;  // 64 MiB in flight: a virtio or NVMe disk needs several to reach its bandwidth

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// A positive number (digits, a decimal point, an exponent); nothing else.
bool positive_number(const std::string& v, double& out) {
  if (v.empty() || !(std::isdigit(static_cast<unsigned char>(v[0])) || v[0] == '.')) return false;
  char* end = nullptr;
  out = std::strtod(v.c_str(), &end);
  return *end == '\0' && std::isfinite(out) && out > 0;
}

std::string profile_dir(const device_profile_options& o) {
  if (!o.cache_dir.empty()) return o.cache_dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return std::string(x) + "/deepwell/device-profiles";
  if (const char* h = std::getenv("HOME"); h && *h == '/') return std::string(h) + "/.cache/deepwell/device-profiles";
  return "";
}

// mkdir -p, for the cache's folders only.
bool make_dirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i)
    if (i == dir.size() || dir[i] == '/') {
      const std::string d = dir.substr(0, i);
      if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
  return true;
}

// One aligned buffer a thread, for O_DIRECT.
struct aligned_buffer {
  void* p = nullptr;
  explicit aligned_buffer(size_t n) {
    if (::posix_memalign(&p, 4096, n) != 0) throw error("device probe: out of memory");
  }
  ~aligned_buffer() { std::free(p); }
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

device_profile parse_device_profile(const std::string& text) {
  device_profile p;
  p.source = "given";
  bool iops = false, bw = false;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    part = trim(part);
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    if (eq == std::string::npos)
      throw error("device profile '" + text + "': '" + part + "' is not name=value (iops=70000,bandwidth=1.5GiB)");
    const std::string name = trim(part.substr(0, eq)), value = trim(part.substr(eq + 1));
    double n = 0;
    if (name == "iops") {
      if (!positive_number(value, n)) throw error("device profile '" + text + "': iops '" + value + "' is not a positive number");
      p.random_iops = n;
      iops = true;
    } else if (name == "bandwidth") {
      // A size a second; a plain decimal such as 1.5e9 as well.
      const std::optional<uint64_t> b = parse_size(value);
      if (b && *b > 0) p.seq_bytes_per_s = double(*b);
      else if (positive_number(value, n)) p.seq_bytes_per_s = n;
      else
        throw error("device profile '" + text + "': bandwidth '" + value + "' is not bytes a second " + size_examples);
      bw = true;
    } else if (name == "read" || name == "depth") {
      const std::optional<uint64_t> b = parse_size(value);
      if (!b || *b == 0 || *b > (1u << 30))
        throw error("device profile '" + text + "': " + name + " '" + value + "' is not a positive whole number");
      (name == "read" ? p.read_bytes : p.depth) = uint32_t(*b);
    } else {
      throw error("device profile '" + text + "': unknown name '" + name + "' (iops, bandwidth, read, depth)");
    }
  }
  if (!iops || !bw) throw error("device profile '" + text + "': needs both iops and bandwidth (iops=70000,bandwidth=1.5GiB)");
  return p;
}

std::string device_profile_text(const device_profile& p) {
  char b[160];
  std::snprintf(b, sizeof b, "iops=%.0f,bandwidth=%.0f,read=%u,depth=%u", p.random_iops, p.seq_bytes_per_s,
                p.read_bytes, p.depth);
  return b;
}

device_profile default_device_profile(const std::string& why) {
  device_profile p;
  p.random_iops = defaults::builtin::device_random_iops;
  p.seq_bytes_per_s = defaults::builtin::device_seq_bytes_per_s;
  p.read_bytes = probe_read_bytes;
  p.depth = probe_depth;
  p.source = "default";
  p.note = why;
  return p;
}

std::string device_key(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw error(errno_message("device profile: stat " + path, errno));
  return "dev-" + std::to_string(major(st.st_dev)) + "-" + std::to_string(minor(st.st_dev));
}

device_profile measure_device(const std::string& path, double seconds) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0)
    throw error(errno_message("device probe: open " + path + " with O_DIRECT (needed to time the disk, not the page cache)", errno));
  struct stat st {};
  ::fstat(fd, &st);
  const uint64_t size = uint64_t(st.st_size) / probe_read_bytes * probe_read_bytes;
  if (size < probe_min_bytes) {
    ::close(fd);
    throw error("device probe: " + path + " has " + std::to_string(st.st_size) + " bytes, fewer than the " +
                std::to_string(probe_min_bytes >> 20) + " MiB the probe reads from");
  }
  std::atomic<bool> failed{false};
  std::atomic<int> err{0};
  // Random reads: `probe_depth` threads, each a blocking read at a time.
  std::atomic<uint64_t> reads{0};
  const double half = std::max(0.05, seconds / 2);
  auto t0 = std::chrono::steady_clock::now();
  {
    std::vector<std::thread> ts;
    for (uint32_t i = 0; i < probe_depth; ++i)
      ts.emplace_back([&, i] {
        aligned_buffer b(probe_read_bytes);
        uint64_t x = 0x9E3779B97F4A7C15ull * (i + 1), n = 0;
        const uint64_t blocks = size / probe_read_bytes;
        while (!failed.load(std::memory_order_relaxed) && since(t0) < half) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          if (::pread(fd, b.p, probe_read_bytes, off_t((x % blocks) * probe_read_bytes)) != ssize_t(probe_read_bytes)) {
            err = errno;
            failed = true;
          }
          ++n;
        }
        reads += n;
      });
    for (auto& t : ts) t.join();
  }
  const double random_s = since(t0);
  // Sequential reads: large requests over the file in order, several in flight.
  std::atomic<uint64_t> next{0}, bytes{0};
  t0 = std::chrono::steady_clock::now();
  {
    std::vector<std::thread> ts;
    for (unsigned i = 0; i < probe_seq_threads; ++i)
      ts.emplace_back([&] {
        aligned_buffer b(probe_seq_request);
        while (!failed.load(std::memory_order_relaxed) && since(t0) < half) {
          const uint64_t at = next.fetch_add(probe_seq_request);
          if (at >= size) break;
          const uint64_t n = std::min(probe_seq_request, size - at);
          const ssize_t k = ::pread(fd, b.p, n, off_t(at));
          if (k != ssize_t(n)) {
            err = errno;
            failed = true;
          }
          bytes += n;
        }
      });
    for (auto& t : ts) t.join();
  }
  const double seq_s = since(t0);
  ::close(fd);
  if (failed) throw error(errno_message("device probe: an O_DIRECT read of " + path + " failed", err));
  device_profile p;
  p.random_iops = double(reads) / random_s;
  p.seq_bytes_per_s = double(bytes) / seq_s;
  p.read_bytes = probe_read_bytes;
  p.depth = probe_depth;
  p.source = "measured";
  char b[200];
  std::snprintf(b, sizeof b, "measured on %s: %llu random reads in %.2f s, %.0f MiB in order in %.2f s", path.c_str(),
                (unsigned long long)reads.load(), random_s, double(bytes) / 1048576.0, seq_s);
  p.note = b;
  return p;
}

device_profile device_profile_for(const std::string& path, const device_profile_options& o) {
  if (!o.given.empty()) {
    device_profile p = parse_device_profile(o.given);
    p.note = "given";
    return p;
  }
  if (const std::string env = defaults::device_profile(); !env.empty()) {
    device_profile p;
    try {
      p = parse_device_profile(env);
    } catch (const error& e) {
      throw error(std::string("DEEPWELL_DEVICE_PROFILE: ") + e.what());
    }
    p.source = "environment";
    p.note = "DEEPWELL_DEVICE_PROFILE";
    return p;
  }
  std::string key;
  try {
    key = device_key(path);
  } catch (const error& e) {
    device_profile d = default_device_profile(e.what());
    detail::log_line(detail::log_level::warn, d.note + "; the built-in device profile stands in");
    return d;
  }
  const std::string dir = profile_dir(o);
  const std::string file = dir.empty() ? "" : dir + "/" + key;
  std::string cache_note;
  if (!o.remeasure && !file.empty()) {
    std::ifstream in(file);
    std::string line;
    if (in && std::getline(in, line)) {
      try {
        device_profile p = parse_device_profile(line);
        p.source = "cached";
        p.key = key;
        p.note = "cached in " + file;
        return p;
      } catch (const error& e) {
        cache_note = "; the cached profile " + file + " was unreadable (" + e.what() + ") and is replaced";
      }
    }
  }
  device_profile p;
  try {
    p = measure_device(path, o.probe_seconds);
  } catch (const error& e) {
    device_profile d = default_device_profile(std::string("not measured: ") + e.what() + cache_note);
    d.key = key;
    // A route chosen on guessed numbers is never silent.
    detail::log_line(detail::log_level::warn, "the storage under " + path + " (" + key + ") " + d.note +
                                                  "; the built-in profile stands in (" + device_profile_text(d) + ")");
    return d;
  }
  p.key = key;
  p.note += cache_note;
  if (file.empty()) {
    p.note += "; not cached (neither XDG_CACHE_HOME nor HOME is set)";
    return p;
  }
  // Written whole under a temporary name, then renamed: a reader never sees half.
  const std::string tmp = file + ".tmp" + std::to_string(::getpid());
  bool ok = make_dirs(dir);
  if (ok) {
    std::ofstream out(tmp, std::ios::trunc);
    out << device_profile_text(p) << "\n";
    out.close();
    ok = bool(out) && ::rename(tmp.c_str(), file.c_str()) == 0;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    p.note += "; not cached (" + file + " could not be written)";
  } else {
    p.note += "; cached in " + file;
  }
  return p;
}

}  // namespace deepwell
