// `deepwell grep` on the host side: the dictionary, the list of files, the
// runs (CPU threads here, GPU warps in deepwell_cuda), the output's parser
// and a plain C++ reference the results are checked against.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepwell/cache/cache_options.hpp"
#include "deepwell/files/file_system.hpp"
#include "grep/grep.hpp"
#include "deepwell/common/thread_times.hpp"

namespace deepwell {

struct grep_dictionary {
  std::vector<std::string> words;  // kept: made of word bytes only, at most 255 bytes, no duplicates
  uint64_t dropped = 0;            // lines that are not such a word (an apostrophe, a space, ...)
  std::vector<uint8_t> blob;
  std::vector<uint32_t> offs;
  std::vector<uint32_t> table;
  uint32_t max_len = 0;
  // The view workers read (pointers into this dictionary's vectors).
  grep_dict_ref ref() const { return {blob.data(), offs.data(), table.data(), uint32_t(table.size() - 1), max_len}; }
};
// Reads a word list, one word per line (wamerican's /usr/share/dict/words).
grep_dictionary load_grep_dictionary(const std::string& path);
grep_dictionary make_grep_dictionary(const std::vector<std::string>& lines);

// Regular files beneath root (symlinks not followed), as paths relative to
// it, sorted; paths of grep_path_stride bytes or more are left out and counted.
std::vector<std::string> list_grep_files(const std::string& root, uint64_t* too_long = nullptr);

// The job's path list: files.size() entries of grep_path_stride bytes.
std::vector<char> grep_path_table(const std::vector<std::string>& files);

// Everything a grep_job points at, in host memory, for workers that are CPU
// threads (or emulated warps). The job's output file is left to the caller.
struct host_grep_run {
  std::vector<char> paths;
  std::vector<grep_scratch> scratch;
  unsigned long long next = 0, cursor = 0;
  grep_counters counters{};
  std::vector<grep_piece> pieces;
  unsigned long long pieces_made = 0, pieces_taken = 0;
  grep_job job;
  host_grep_run(const grep_dictionary& d, const std::vector<std::string>& files, const gfs_ref& in,
                const gfs_ref& out, unsigned workers);
  host_grep_run(const host_grep_run&) = delete;  // the job points into it
  host_grep_run& operator=(const host_grep_run&) = delete;
};

// (word, path) -> occurrences as a whole word.
using grep_counts = std::map<std::pair<std::string, std::string>, uint64_t>;

struct grep_options {
  std::string root;          // the tree to search
  std::string out_dir;       // where the output file is written (through a second file system)
  std::string out_name = "grep.out";
  unsigned workers = 0;      // CPU threads (0: hardware threads); GPU: warps per SM x SMs
  // The page cache (cache_options.hpp). Its page_size, where 0, is
  // grep_default_page_size (or DEEPWELL_PAGE_SIZE where set): a source
  // tree's files are mostly a few KiB, and a 16 KiB page holds most of a
  // file, one fetch instead of three 4 KiB ones.
  cache_options cache;
  uint32_t service_threads = 0;  // the searched tree's file system (0: its default)
  uint32_t service_slots = 0;    // its request slots (0: 256)
  uint32_t blocks_per_sm = 0;    // GPU: 128-thread blocks an SM, 4 or 8 (0: 4)
  // Files longer than this are counted in pieces of this size by several
  // workers: a multiple of 4 KiB from 16 KiB to 1 GiB (0: grep_piece_bytes).
  uint64_t piece_bytes = 0;
  // GPU: the host thread spins while it waits for the kernel (CUDA's
  // default with a core a context). By default it sleeps instead, leaving
  // its core to the file service and the pollers that the kernel needs.
  bool spin_wait = false;
  // Diagnostics: sample where the host threads of a group (dw-fs0: the
  // searched tree's service) are during the search (thread_sampler).
  std::string sample_threads;
  bool profile_service = false;  // file_system_options::profile_service for the tree's service
  // The output made durable once closed (the host's fdatasync of the file,
  // timed), as the vanilla program's --fsync makes its own.
  bool fsync = false;
  uint32_t reply_poll_ns = 0;    // file_system_options::reply_poll_ns for both file systems
  // A deepwell server's socket: root and out_dir are then its tree
  // datasets (read and read-write), and the files are opened and read by
  // the server as this user's grants allow. Empty: a controller in this
  // process.
  std::string server;
};

// grep_options::piece_bytes as the job takes it; throws deepwell::error
// naming a size that is not a multiple of 4 KiB from 16 KiB to 1 GiB.
uint64_t grep_piece_size(const grep_options& o);

// The link grep's cache is made on: the server's (o.server), or a
// controller in this process.
std::shared_ptr<controller_link> grep_link(const grep_options& o);
// The files of o.root as list_grep_files gives them; under a server
// (o.server), its tree's, walked through the file API.
std::vector<std::string> list_grep_files(const grep_options& o, uint64_t* too_long = nullptr);

struct grep_report {
  grep_counters counters{};
  double seconds = 0;        // all of it: the output's open, the search, the output's close (not report_seconds)
  double open_seconds = 0;   // the output's gopen
  double report_seconds = 0; // the host's thread and machine times read after the search: diagnostics, left out of seconds
  double search_seconds = 0; // the search kernel (or threads): every file opened, read and closed
  double close_seconds = 0;  // the output's gclose: the rest of its pages written back, its size set
  double setup_seconds = 0;  // before `seconds`: the cache, the file systems, the job's memory
  uint64_t files = 0;        // listed
  uint64_t output_bytes = 0;
  file_system_stats input;    // the searched tree's file system, after the run
  unsigned service_threads = 0;
  uint64_t workers = 0, resident_workers = 0;  // GPU: warps launched, and resident at once
  std::vector<thread_time> threads;  // the host's threads during the search (thread_times.hpp)
  machine_cpu_time machine;          // the machine's CPU time during the search
  std::vector<std::pair<std::string, uint64_t>> thread_samples;  // grep_options::sample_threads
};

// The searched tree's and the output's file systems as `o` asks, for the
// CPU and the GPU run alike (default_slots: the tree's slots where `o`
// gives none). Every worker may hold a file open: the tree's open files
// are at least `workers` and some, and the process's soft limit of
// descriptors is raised (up to its hard limit) to hold them.
file_system_options grep_input_options(const grep_options& o, uint32_t default_slots, uint64_t workers);
constexpr uint32_t grep_default_page_size = 16384;
// A queue pair's staging is entries x page of pinned host memory: 64 pairs
// of the default 512 entries of 16 KiB pages pinned 512 MiB, which took
// 0.24 s to pin and 0.07 s to release in a grep of 1.1 s on an H200, and
// 128 entries searched as fast (bench/probes/grep-vs-cpu).
constexpr uint32_t grep_default_queue_entries = 128;
// The cache grep makes: o.cache applied to grep's defaults.
cache_config grep_cache_config(const grep_options& o);
// grep_options::fsync: fdatasync of the closed output file; throws
// deepwell::error naming the file when it fails.
void make_grep_output_durable(const grep_options& o);
file_system_options grep_output_options(const grep_options& o);

// The host during a search, from construction to report(): each thread
// group's times, the machine's CPU time, and (o.sample_threads) where that
// group's threads are.
class grep_host_watch {
 public:
  explicit grep_host_watch(const grep_options& o);
  void report(grep_report& rep);

 private:
  thread_clock threads_;
  machine_cpu_time machine0_ = machine_cpu_time::now();
  std::optional<thread_sampler> sampler_;
};

grep_report run_grep_cpu(const grep_options& o, const grep_dictionary& d, const std::vector<std::string>& files);
// deepwell_cuda (apps/grep/grep_gpu.cu).
grep_report run_grep_gpu(const grep_options& o, const grep_dictionary& d, const std::vector<std::string>& files);

// Sums the lines of an output file.
grep_counts parse_grep_output(const std::string& path);
// The same counts by a plain scan of the files on the host.
grep_counts reference_grep(const std::string& root, const grep_dictionary& d, const std::vector<std::string>& files);

}  // namespace deepwell
