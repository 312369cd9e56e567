// Every setting's default, stated once, and the one rule that picks a
// value (KvikIO-style): an explicit argument beats the environment, which
// beats the built-in default. A value in the environment that is not a
// valid one is refused with an error naming the variable, never silently
// replaced. The C++ configuration structs take their defaults from here,
// the C ABI's dw_array_options_init from them, and Python from the C ABI.
// docs/settings.md lists every knob.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deepwell::defaults {

// ---- built-in defaults ----
namespace builtin {
constexpr uint32_t io_depth = 512;            // I/O in flight per poller
constexpr const char* io_backend = "auto";    // uring, threads or auto
constexpr const char* buffered_writes = "merged";  // lane, inline or merged (io_engine.hpp)
constexpr uint32_t poller_spin_us = 100;      // busy-poll this long after the last work, then sleep
constexpr uint32_t poller_max_sleep_us = 200; // longest idle sleep between doorbell checks
constexpr uint32_t poller_batch = 16;         // commands taken from a queue before the next (0: all)
constexpr uint32_t pass_commands = 8;         // server mode: commands a poller's pass shares out among clients
constexpr uint32_t page_size = 4096;          // cache page bytes
constexpr uint64_t cache_bytes = 256ull << 20;  // cache page data
constexpr uint32_t gpu_queue_pairs = 64;      // a GPU cache's queue pairs
constexpr uint32_t cpu_queue_pairs = 4;       // a CPU cache's queue pairs
constexpr uint32_t queue_entries = 512;       // entries per queue pair
constexpr uint64_t timeout_ms = 30000;        // deadline of every wait inside an access
constexpr const char* direct_files = "resident";  // never, resident or always
// "resident": the share of a file that must be in the page cache for the
// direct tier to map it. Not all of it: a file read whole a moment ago can
// lose a few pages to reclaim on a loaded machine, and a mapping faults
// them back in.
constexpr double direct_resident_share = 0.99;
constexpr double clean_threshold = 1.0 / 16;  // dirty share of the slots above which the cleaner runs
constexpr const char* staging_stores = "streaming";  // streaming, cached or demote
constexpr uint32_t max_cpu_threads = 16;      // a CPU client's gather threads: the cores, at most this
constexpr const char* log_level = "warn";     // quiet, warn (fallbacks) or info (also each dataset's route)
// Storage whose profile can be neither measured nor read (device_profile.hpp):
// a SATA SSD's order, so that the route model (read_route.hpp) still weighs
// a whole extent's sequential read against page reads.
constexpr double device_random_iops = 50000;        // random 4 KiB reads a second, 64 in flight
constexpr double device_seq_bytes_per_s = 500e6;    // sequential bytes a second, large requests
// Checkpoints (dw_checkpoint_open, deepwell.checkpoint): large pages, and
// few queue pairs and entries. Staging is pairs x entries x page of memory
// that every open populates and pins and every close frees (a GPU cache's
// 64 x 512 x 64 KiB would be 2 GiB); 4 x 32 (8 MiB, 128 writes of 64 KiB in
// flight) still keeps the disk busy. On an H200 a 512 MiB save with open
// and close took 0.24 s with 8 MiB of staging against 0.37 s with 128 MiB,
// the save itself no slower (bench/open_cost_bench.cu).
constexpr uint32_t checkpoint_page_size = 65536;
constexpr uint32_t checkpoint_gpu_queue_pairs = 4;
constexpr uint32_t checkpoint_cpu_queue_pairs = 4;
constexpr uint32_t checkpoint_queue_entries = 32;
// A striped array's chunk where its user names none (bytes a member takes
// in turn), and the largest a user may name (the server's TOML, the C ABI,
// Python).
constexpr uint64_t stripe_chunk = 64 << 10;
constexpr uint64_t max_stripe_chunk = 64 << 20;
// Controller poller threads: half the cores, from 2 to 8. Each poller
// copies what it serves (pread into staging, for files in the page cache),
// so a stream needs several: on the H100 machine (16 cores) a warm 4 GiB
// gread stream ran 7.6 GB/s with 2 and 23 GB/s with 8. Idle pollers sleep.
uint32_t pollers();
}  // namespace builtin

// ---- values: the environment's if set (checked), else the built-in ----
uint32_t pollers();                  // DEEPWELL_POLLERS
uint32_t io_depth();                 // DEEPWELL_IO_DEPTH
std::string io_backend();            // DEEPWELL_IO
std::string buffered_writes();       // DEEPWELL_BUFFERED_WRITES
uint32_t poller_spin_us();           // DEEPWELL_POLLER_SPIN_US
uint32_t poller_max_sleep_us();      // DEEPWELL_POLLER_MAX_SLEEP_US
uint32_t poller_batch();             // DEEPWELL_POLLER_BATCH
uint32_t pass_commands();            // DEEPWELL_PASS_COMMANDS
uint32_t page_size();                // DEEPWELL_PAGE_SIZE
uint64_t cache_bytes();              // DEEPWELL_CACHE_BYTES (a number, or with KiB/MiB/GiB)
uint32_t gpu_queue_pairs();          // DEEPWELL_GPU_QUEUE_PAIRS
uint32_t cpu_queue_pairs();          // DEEPWELL_CPU_QUEUE_PAIRS
uint32_t queue_entries();            // DEEPWELL_QUEUE_ENTRIES
uint64_t timeout_ns();               // DEEPWELL_TIMEOUT_MS
std::string direct_files();          // DEEPWELL_DIRECT_FILES
double clean_threshold();            // DEEPWELL_CLEAN_THRESHOLD
std::string staging_stores();        // DEEPWELL_STAGING_STORES
uint32_t cpu_threads();              // DEEPWELL_CPU_THREADS
std::string log_level();             // DEEPWELL_LOG
std::string device_profile();        // DEEPWELL_DEVICE_PROFILE (text, parsed by device_profile.hpp; empty: none given)

// ---- the one parser ----
// The unsigned number in environment variable `name`, if it is set and not
// empty; `fallback` otherwise. Throws deepwell::error naming the variable,
// its value and what was expected when it is not a number in [min, max].
// `byte_units`: also takes a KiB, MiB, GiB or TiB suffix (K, M, G, T too).
uint64_t env_number(const char* name, uint64_t fallback, uint64_t min, uint64_t max, bool byte_units = false);
// The value of `name` if it is one of `choices`; `fallback` if unset.
std::string env_choice(const char* name, const std::string& fallback, const std::vector<std::string>& choices);
// A share from 0 to 1.
double env_share(const char* name, double fallback);

// Every knob with its variable, built-in default, current value and
// meaning (for `deepwell settings` and the docs' table).
struct knob {
  std::string variable, builtin, value, meaning;
};
std::vector<knob> knobs();

}  // namespace deepwell::defaults
