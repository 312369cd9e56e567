// `deepwell grep`, host side (files/grep_run.hpp): the dictionary and its
// hash table, the file list, CPU threads as workers, the output's parser and
// the reference scan.
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>
#include <thread>

#include "deepwell/common/defaults.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/files/file_system.hpp"
#include "grep/grep_run.hpp"
#include "deepwell/cache/page_cache.hpp"
#include "deepwell/link/server_link.hpp"

namespace deepwell {

// CPU workers are threads: past this, a typo (--workers 100000) would only
// find the machine's thread limit.
constexpr unsigned max_cpu_workers = 4096;

grep_dictionary make_grep_dictionary(const std::vector<std::string>& lines) {
  grep_dictionary d;
  std::set<std::string> seen;
  for (const std::string& w : lines) {
    const bool ok = !w.empty() && w.size() <= 255 &&
                    std::all_of(w.begin(), w.end(), [](char c) { return grep_word_byte(uint8_t(c)); });
    if (!ok || !seen.insert(w).second) {
      d.dropped += !ok;
      continue;
    }
    d.words.push_back(w);
  }
  d.offs.push_back(0);
  for (const std::string& w : d.words) {
    d.blob.insert(d.blob.end(), w.begin(), w.end());
    d.offs.push_back(uint32_t(d.blob.size()));
    d.max_len = std::max<uint32_t>(d.max_len, uint32_t(w.size()));
  }
  uint32_t size = 16;
  while (size < 2 * d.words.size()) size *= 2;
  d.table.assign(size, 0);
  for (uint32_t i = 0; i < d.words.size(); ++i) {
    const std::string& w = d.words[i];
    uint32_t h = uint32_t(grep_hash(reinterpret_cast<const uint8_t*>(w.data()), uint32_t(w.size()))) & (size - 1);
    while (d.table[h]) h = (h + 1) & (size - 1);
    d.table[h] = i + 1;
  }
  return d;
}

grep_dictionary load_grep_dictionary(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw error("grep: cannot read the dictionary " + path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    lines.push_back(l);
  }
  grep_dictionary d = make_grep_dictionary(lines);
  if (d.words.empty()) throw error("grep: the dictionary " + path + " holds no usable word");
  return d;
}

std::vector<std::string> list_grep_files(const std::string& root, uint64_t* too_long) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw error("grep: " + root + " is not a directory");
  std::vector<std::string> out;
  uint64_t skipped = 0;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    // The entry's type as the directory gave it (no stat), and the path
    // made relative by its text: fs::relative resolves both paths on disk,
    // several system calls a file (0.23 s of 21,000 files on an H200 host).
    if (it->is_symlink(ec) || !it->is_regular_file(ec)) continue;
    std::string rel = it->path().lexically_relative(root).string();
    if (rel.size() >= grep_path_stride) {
      ++skipped;
      continue;
    }
    out.push_back(std::move(rel));
  }
  std::sort(out.begin(), out.end());
  if (too_long) *too_long = skipped;
  return out;
}

std::vector<std::string> list_grep_files(const grep_options& o, uint64_t* too_long) {
  if (o.server.empty()) return list_grep_files(o.root, too_long);
  // The server's tree, walked through the file API on a host cache.
  file_system_options fo;
  fo.root = o.root;
  fo.read_only = true;
  fo.max_open = 1;
  fo.max_dirs = 64;
  fo.slots = 1;
  fo.service_threads = 1;
  cache_config cc;
  cc.capacity_bytes = 64 * cc.page_size;
  auto fs = make_host_file_system(make_host_page_cache(grep_link(o), cc), fo);
  const gfs_ref& g = fs->ref();
  std::vector<std::string> out, dirs{""};
  uint64_t skipped = 0;
  while (!dirs.empty()) {
    const std::string dir = std::move(dirs.back());
    dirs.pop_back();
    const gdir d = g.gopendir(one_lane{}, dir.empty() ? "." : dir.c_str());
    if (!d.ok()) {
      if (dir.empty()) throw error("grep: the tree " + o.root + " cannot be listed: " + std::strerror(d.err));
      continue;  // as the local walk skips what it may not read
    }
    gdirent e;
    for (int n; (n = g.greaddir(one_lane{}, d, &e)) == 1;) {
      const std::string rel = dir.empty() ? std::string(e.name) : dir + "/" + e.name;
      if (e.type == DT_DIR) {
        dirs.push_back(rel);
      } else if (e.type == DT_REG) {
        if (rel.size() >= grep_path_stride)
          ++skipped;
        else
          out.push_back(rel);
      }
    }
    g.gclosedir(one_lane{}, d);
  }
  std::sort(out.begin(), out.end());
  if (too_long) *too_long = skipped;
  return out;
}

grep_counts parse_grep_output(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("grep: cannot read the output " + path);
  grep_counts c;
  for (std::string l; std::getline(in, l);) {
    const size_t a = l.find('\t'), b = a == std::string::npos ? a : l.find('\t', a + 1);
    if (b == std::string::npos) throw error("grep: a malformed line in " + path + ": " + l.substr(0, 80));
    c[{l.substr(a + 1, b - a - 1), l.substr(b + 1)}] += std::stoull(l.substr(0, a));
  }
  return c;
}

grep_counts reference_grep(const std::string& root, const grep_dictionary& d, const std::vector<std::string>& files) {
  std::set<std::string> dict(d.words.begin(), d.words.end());
  grep_counts c;
  for (const std::string& f : files) {
    std::ifstream in(root + "/" + f, std::ios::binary);
    const std::string s((std::istreambuf_iterator<char>(in)), {});
    for (size_t i = 0; i < s.size();) {
      if (!grep_word_byte(uint8_t(s[i]))) {
        ++i;
        continue;
      }
      size_t e = i;
      while (e < s.size() && grep_word_byte(uint8_t(s[e]))) ++e;
      const std::string w = s.substr(i, e - i);
      if (dict.count(w)) ++c[{w, f}];
      i = e;
    }
  }
  return c;
}

std::vector<char> grep_path_table(const std::vector<std::string>& files) {
  std::vector<char> paths(files.size() * grep_path_stride, 0);
  for (size_t i = 0; i < files.size(); ++i) std::memcpy(paths.data() + i * grep_path_stride, files[i].data(), files[i].size());
  return paths;
}

host_grep_run::host_grep_run(const grep_dictionary& d, const std::vector<std::string>& files, const gfs_ref& in,
                             const gfs_ref& out, unsigned workers)
    : paths(grep_path_table(files)), scratch(workers), pieces(grep_max_pieces) {  // value-initialised: empty
  job.in = in;
  job.out = out;
  job.dict = d.ref();
  job.paths = paths.data();
  job.npaths = uint32_t(files.size());
  job.next_path = &next;
  job.out_cursor = &cursor;
  job.scratch = scratch.data();
  job.counters = &counters;
  job.pieces = pieces.data();
  job.pieces_made = &pieces_made;
  job.pieces_taken = &pieces_taken;
}

uint64_t grep_piece_size(const grep_options& o) {
  const uint64_t b = o.piece_bytes ? o.piece_bytes : grep_piece_bytes;
  if (b % grep_chunk || b < 16384 || b > (1ull << 30))
    throw error("grep: a piece must be a multiple of 4096 bytes from 16 KiB to 1 GiB, not " + std::to_string(b));
  return b;
}

cache_config grep_cache_config(const grep_options& o) {
  cache_config base;
  if (!std::getenv("DEEPWELL_PAGE_SIZE")) base.page_size = grep_default_page_size;
  if (!std::getenv("DEEPWELL_QUEUE_ENTRIES")) base.queue_entries = grep_default_queue_entries;
  return o.cache.applied_to(base);
}

std::shared_ptr<controller_link> grep_link(const grep_options& o) {
  return o.server.empty() ? embedded_link() : server_link::connect(o.server, "grep");
}

void make_grep_output_durable(const grep_options& o) {
  const std::string path = o.out_dir + "/" + o.out_name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw error("grep: cannot open " + path + " to make it durable: " + std::strerror(errno));
  const int r = ::fdatasync(fd), e = errno;
  ::close(fd);
  if (r != 0) throw error("grep: fdatasync of " + path + " failed: " + std::strerror(e));
}

file_system_options grep_input_options(const grep_options& o, uint32_t default_slots, uint64_t workers) {
  file_system_options f;
  f.max_open = uint32_t(std::min<uint64_t>(std::max<uint64_t>(f.max_open, workers + 64), 1u << 20));
  // The descriptors of the open files, the output's and the process's
  // own; a soft limit below that gave some of 4,224 warps EMFILE.
  rlimit lim{};
  const rlim_t need = rlim_t(f.max_open) + 256;
  if (o.server.empty() && ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < need) {
    lim.rlim_cur = lim.rlim_max == RLIM_INFINITY || lim.rlim_max >= need ? need : lim.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &lim);  // where it stays lower, opens past it get EMFILE, reported
  }
  f.root = o.root;
  f.read_only = true;
  f.slots = o.service_slots ? o.service_slots : default_slots;
  if (o.service_threads) f.service_threads = o.service_threads;
  f.profile_service = o.profile_service;
  f.reply_poll_ns = o.reply_poll_ns;
  return f;
}

file_system_options grep_output_options(const grep_options& o) {
  file_system_options f;
  f.root = o.out_dir;
  f.reply_poll_ns = o.reply_poll_ns;
  return f;
}

grep_host_watch::grep_host_watch(const grep_options& o) {
  if (!o.sample_threads.empty()) sampler_.emplace(o.sample_threads, 200, 3, 4);
}

void grep_host_watch::report(grep_report& rep) {
  rep.machine = machine_cpu_time::now() - machine0_;
  rep.threads = threads_.elapsed();
  if (sampler_) rep.thread_samples = sampler_->stop();
}

grep_report run_grep_cpu(const grep_options& o, const grep_dictionary& d, const std::vector<std::string>& files) {
  const auto entry = std::chrono::steady_clock::now();
  grep_report rep;
  rep.files = files.size();
  const cache_config cc = grep_cache_config(o);
  auto cache = make_host_page_cache(grep_link(o), cc);
  const unsigned workers = o.workers ? o.workers : std::max(1u, std::thread::hardware_concurrency());
  if (workers > max_cpu_workers)
    throw error("grep: " + std::to_string(workers) + " CPU workers: at most " + std::to_string(max_cpu_workers) +
                " threads");
  const file_system_options in_opts = grep_input_options(o, file_system_options{}.slots, workers);
  auto in = make_host_file_system(cache, in_opts);
  auto out = make_host_file_system(cache, grep_output_options(o));

  host_grep_run run(d, files, in->ref(), out->ref(), workers);
  grep_job& j = run.job;
  j.piece_bytes = grep_piece_size(o);
  const auto t0 = std::chrono::steady_clock::now();
  rep.setup_seconds = std::chrono::duration<double>(t0 - entry).count();
  j.out_file = j.out.gopen(o.out_name.c_str(), g_wronly | g_gwronce);  // lines at disjoint offsets, never read
  if (!j.out_file.ok())
    throw error("grep: cannot open " + o.out_dir + "/" + o.out_name + " for writing: " + std::strerror(j.out_file.err));
  rep.open_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  grep_host_watch host(o);
  std::vector<std::thread> threads;
  try {
    for (unsigned k = 0; k < workers; ++k) threads.emplace_back([&j, k] { grep_worker(one_lane{}, j, k); });
  } catch (const std::system_error& e) {  // the machine's thread limit: the ones started finish, then the error
    for (auto& t : threads) t.join();
    throw error("grep: cannot start CPU worker " + std::to_string(threads.size() + 1) + " of " +
                std::to_string(workers) + ": " + e.what());
  }
  for (auto& t : threads) t.join();
  const auto t1 = std::chrono::steady_clock::now();
  host.report(rep);  // the workers have ended: only the service's and controller's threads
  const auto t1r = std::chrono::steady_clock::now();
  // Durable: through the file API under a server (whose files these are),
  // else the host's own fdatasync once closed, as the vanilla program's.
  int c = o.fsync && !o.server.empty() ? j.out.gfsync(one_lane{}, j.out_file) : 0;
  const int closed = j.out.gclose(j.out_file);
  if (!c) c = closed;
  if (!c && o.fsync && o.server.empty()) make_grep_output_durable(o);
  const auto t2 = std::chrono::steady_clock::now();
  using secs = std::chrono::duration<double>;
  rep.report_seconds = secs(t1r - t1).count();
  rep.seconds = secs(t2 - t0).count() - rep.report_seconds;
  rep.search_seconds = secs(t1 - t0).count();
  rep.close_seconds = secs(t2 - t1r).count();
  if (c) throw error("grep: closing the output failed: " + std::string(std::strerror(-c)));
  rep.counters = run.counters;
  rep.output_bytes = run.cursor;
  rep.input = in->stats();
  rep.service_threads = in_opts.service_threads;
  return rep;
}

}  // namespace deepwell
