// The settings' one rule (defaults.hpp): explicit > environment > built-in,
// junk in the environment refused with the variable's name.
#include "deepwell/common/defaults.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "deepwell/common/error.hpp"
#include "deepwell/common/size_text.hpp"

namespace deepwell::defaults {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

[[noreturn]] void refuse(const char* name, const char* value, const std::string& expected) {
  throw error(std::string(name) + "=" + value + " is not " + expected);
}

std::string range_text(uint64_t min, uint64_t max) {
  return "a number from " + std::to_string(min) + " to " + std::to_string(max);
}

}  // namespace

uint64_t env_number(const char* name, uint64_t fallback, uint64_t min, uint64_t max, bool byte_units) {
  const char* v = env(name);
  if (!v) return fallback;
  const std::string expected =
      range_text(min, max) + (byte_units ? " (bytes, or with KiB, MiB, GiB or TiB: 64MiB, 1.5GiB)" : "");
  if (byte_units) {  // the one rule for sizes (size_text.hpp)
    const std::optional<uint64_t> b = parse_size(v);
    if (!b || *b < min || *b > max) refuse(name, v, expected);
    return *b;
  }
  if (*v < '0' || *v > '9') refuse(name, v, expected);
  errno = 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno == ERANGE || *end || n < min || n > max) refuse(name, v, expected);
  return n;
}

std::string env_choice(const char* name, const std::string& fallback, const std::vector<std::string>& choices) {
  const char* v = env(name);
  if (!v) return fallback;
  if (std::find(choices.begin(), choices.end(), v) != choices.end()) return v;
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i) list += (i ? (i + 1 == choices.size() ? " or " : ", ") : "") + choices[i];
  refuse(name, v, "one of " + list);
}

double env_share(const char* name, double fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  if (*end || !std::isfinite(d) || d < 0 || d > 1) refuse(name, v, "a share from 0 to 1 (0.0625, say)");
  return d;
}

namespace builtin {
uint32_t pollers() { return std::clamp(std::thread::hardware_concurrency() / 2, 2u, 8u); }
}  // namespace builtin
uint32_t pollers() { return uint32_t(env_number("DEEPWELL_POLLERS", builtin::pollers(), 1, 256)); }
uint32_t io_depth() { return uint32_t(env_number("DEEPWELL_IO_DEPTH", builtin::io_depth, 1, 65536)); }
std::string io_backend() {
  const std::string s = env_choice("DEEPWELL_IO", builtin::io_backend, {"uring", "io_uring", "threads", "auto"});
  return s == "io_uring" ? "uring" : s;
}
std::string buffered_writes() {
  return env_choice("DEEPWELL_BUFFERED_WRITES", builtin::buffered_writes, {"lane", "inline", "merged"});
}
uint32_t poller_spin_us() {
  return uint32_t(env_number("DEEPWELL_POLLER_SPIN_US", builtin::poller_spin_us, 0, 1000000));
}
uint32_t poller_max_sleep_us() {
  return uint32_t(env_number("DEEPWELL_POLLER_MAX_SLEEP_US", builtin::poller_max_sleep_us, 1, 1000000));
}
uint32_t poller_batch() { return uint32_t(env_number("DEEPWELL_POLLER_BATCH", builtin::poller_batch, 0, 65536)); }
uint32_t pass_commands() { return uint32_t(env_number("DEEPWELL_PASS_COMMANDS", builtin::pass_commands, 0, 65536)); }
uint32_t page_size() {
  const uint64_t p = env_number("DEEPWELL_PAGE_SIZE", builtin::page_size, 512, 65536, true);
  if ((p & (p - 1)) != 0) refuse("DEEPWELL_PAGE_SIZE", env("DEEPWELL_PAGE_SIZE"), "a power of two from 512 to 65536 bytes");
  return uint32_t(p);
}
uint64_t cache_bytes() { return env_number("DEEPWELL_CACHE_BYTES", builtin::cache_bytes, 512, 1ull << 50, true); }
uint32_t gpu_queue_pairs() {
  return uint32_t(env_number("DEEPWELL_GPU_QUEUE_PAIRS", builtin::gpu_queue_pairs, 1, 65535));
}
uint32_t cpu_queue_pairs() {
  return uint32_t(env_number("DEEPWELL_CPU_QUEUE_PAIRS", builtin::cpu_queue_pairs, 1, 65535));
}
uint32_t queue_entries() { return uint32_t(env_number("DEEPWELL_QUEUE_ENTRIES", builtin::queue_entries, 4, 65536)); }
uint64_t timeout_ns() {
  return env_number("DEEPWELL_TIMEOUT_MS", builtin::timeout_ms, 1, 86400000ull) * 1000000ull;
}
std::string direct_files() {
  return env_choice("DEEPWELL_DIRECT_FILES", builtin::direct_files, {"never", "resident", "always"});
}
double clean_threshold() { return env_share("DEEPWELL_CLEAN_THRESHOLD", builtin::clean_threshold); }
std::string staging_stores() {
  return env_choice("DEEPWELL_STAGING_STORES", builtin::staging_stores, {"streaming", "cached", "demote"});
}
uint32_t cpu_threads() {
  const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
  return uint32_t(env_number("DEEPWELL_CPU_THREADS", std::min(builtin::max_cpu_threads, cores), 1, 1024));
}

std::string log_level() { return env_choice("DEEPWELL_LOG", builtin::log_level, {"quiet", "warn", "info"}); }
std::string device_profile() {
  const char* v = env("DEEPWELL_DEVICE_PROFILE");
  return v ? v : "";
}

std::vector<knob> knobs() {
  auto n = [](uint64_t v) { return std::to_string(v); };
  auto d = [](double v) {
    std::string s = std::to_string(v);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    return s;
  };
  return {
      {"DEEPWELL_POLLERS", n(builtin::pollers()), n(pollers()), "controller poller threads (half the cores, 2 to 8)"},
      {"DEEPWELL_IO_DEPTH", n(builtin::io_depth), n(io_depth()), "I/O in flight per poller"},
      {"DEEPWELL_IO", builtin::io_backend, io_backend(), "I/O backend: uring, threads or auto"},
      {"DEEPWELL_BUFFERED_WRITES", builtin::buffered_writes, buffered_writes(),
       "io_uring backend, writes to page-cache files: lane (a thread), inline (the poller) or merged (the poller, "
       "adjacent pages in one vectored write)"},
      {"DEEPWELL_LOG", builtin::log_level, log_level(),
       "what the library says on stderr: quiet, warn (a fallback to a slower path) or info (also each dataset's route)"},
      {"DEEPWELL_POLLER_SPIN_US", n(builtin::poller_spin_us), n(poller_spin_us()),
       "microseconds a poller busy-polls after its last work before it sleeps"},
      {"DEEPWELL_POLLER_MAX_SLEEP_US", n(builtin::poller_max_sleep_us), n(poller_max_sleep_us()),
       "longest sleep of an idle poller between doorbell checks"},
      {"DEEPWELL_POLLER_BATCH", n(builtin::poller_batch), n(poller_batch()),
       "commands a poller takes from one queue before the next (0: all)"},
      {"DEEPWELL_PASS_COMMANDS", n(builtin::pass_commands), n(pass_commands()),
       "server mode: commands a poller's pass shares out among the clients by weight (0: no quota)"},
      {"DEEPWELL_PAGE_SIZE", n(builtin::page_size), n(page_size()), "cache page bytes (512 to 64 KiB, a power of two)"},
      {"DEEPWELL_CACHE_BYTES", n(builtin::cache_bytes), n(cache_bytes()), "cache page data"},
      {"DEEPWELL_GPU_QUEUE_PAIRS", n(builtin::gpu_queue_pairs), n(gpu_queue_pairs()), "a GPU cache's queue pairs"},
      {"DEEPWELL_CPU_QUEUE_PAIRS", n(builtin::cpu_queue_pairs), n(cpu_queue_pairs()), "a CPU cache's queue pairs"},
      {"DEEPWELL_QUEUE_ENTRIES", n(builtin::queue_entries), n(queue_entries()),
       "entries per cache queue pair (a power of two)"},
      {"DEEPWELL_TIMEOUT_MS", n(builtin::timeout_ms), n(timeout_ns() / 1000000), "deadline of every wait in an access"},
      {"DEEPWELL_DIRECT_FILES", builtin::direct_files, direct_files(),
       "read-only files read by GPU warps straight from the page cache: never, resident or always"},
      {"DEEPWELL_CLEAN_THRESHOLD", d(builtin::clean_threshold), d(clean_threshold()),
       "dirty share of the cache above which the cleaner writes pages back ahead of eviction (0: never)"},
      {"DEEPWELL_STAGING_STORES", builtin::staging_stores, staging_stores(),
       "how the controller fills staging: streaming, cached or demote"},
      {"DEEPWELL_CPU_THREADS", "cores, at most " + n(builtin::max_cpu_threads), n(cpu_threads()),
       "a CPU client's gather threads (C ABI and Python)"},
      {"DEEPWELL_DEVICE_PROFILE", "measured once a device (else " + n(uint64_t(builtin::device_random_iops)) + " reads/s, " +
           n(uint64_t(builtin::device_seq_bytes_per_s)) + " B/s)", device_profile(),
       "what storage can do, for choosing page reads or whole-extent reads: iops=N,bandwidth=SIZE"},
  };
}

}  // namespace deepwell::defaults
