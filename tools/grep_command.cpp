// `deepwell grep` (grep_command.hpp).
#include <sys/stat.h>

#include <cstdlib>

#include "cli_checks.hpp"
#include "size_arg.hpp"
#include "grep_command.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>

#include <nlohmann/json.hpp>

#include "deepwell/common/error.hpp"
#include "grep/grep_run.hpp"
#include "gpu_probe.hpp"
#include "json_lines.hpp"

namespace deepwell::tools {

void add_command(CLI::App& app, grep_command& g) {
  g.app = app.add_subcommand("grep", "count each dictionary word's whole-word occurrences in every file of a tree "
                                     "(kernels open, read and close the files through the file API)");
  g.app->add_option("root", g.root, "the tree to search (with --server: the server's tree dataset)")->required();
  g.app->add_option("--dict", g.dict, "word list, one per line (default /usr/share/dict/words, Debian's wamerican)");
  g.app->add_option("--out-dir", g.out_dir, "directory of the output file (with --server: a tree dataset granted read-write)");
  g.app->add_option("--server", g.server,
                    "a deepwell server's socket: the trees are its datasets, opened and read by the server as this "
                    "user's grants allow");
  g.app->add_option("--out", g.out_name, "output file name: lines of count<TAB>word<TAB>path");
  g.app->add_flag("--cpu", g.cpu, "CPU threads as the file API's clients (no GPU needed)");
  g.app->add_option("--workers", g.workers, "CPU threads with --cpu, warps on the GPU (0: the machine's)");
  g.app->add_option("--page-size", g.page_size,
                    "cache page bytes, 512 to 65536, a power of two (0: 16384, or DEEPWELL_PAGE_SIZE where set)")
      ->transform(page_bytes);
  g.app->add_option("--service-threads", g.service_threads, "host threads answering the kernels' opens and closes (0: the default)");
  g.app->add_option("--service-slots", g.service_slots, "request slots of the tree's file service (0: 256 on the GPU)");
  g.app->add_option("--blocks-per-sm", g.blocks_per_sm, "GPU: 128-thread blocks of workers an SM, 4 or 8 (0: 4)");
  g.app->add_option("--piece-bytes", g.piece_bytes,
                    "files longer than this are counted in pieces of this size by several workers (a multiple of "
                    "4096 from 16 KiB to 1 GiB; 0: 64 KiB)");
  g.app->add_flag("--spin-wait", g.spin_wait, "GPU: the host thread spins while the kernel runs (default: it sleeps)");
  g.app->add_option("--sample-threads", g.sample_threads,
                    "diagnostics: sample where the host threads of a group are (dw-fs0: the tree's file service; "
                    "dw-poller), into the JSON");
  g.app->add_flag("--profile-service", g.profile_service,
                  "diagnostics: the tree's file service measures its CPU time, sleeps and faults in the opens' calls");
  g.app->add_option("--reply-poll-ns", g.reply_poll_ns,
                    "GPU: the longest sleep of a warp between polls for the file service's reply (0: 200 ns)");
  g.app->add_flag("--fsync", g.fsync, "make the output durable once closed (fdatasync, timed), as the vanilla program's --fsync");
  g.app->add_flag("--check", g.check, "compare every count with a plain scan of the files on the host");
  g.app->add_option("--json", g.json, "append a JSON line with the run's figures here")->check(appendable);
}

namespace {

// The output, checked before the run: a file name in a directory that is
// there, outside the tree searched (inside it, the run emptied a file it
// was counting, and later runs counted the output), and not the dictionary.
void check_grep_output(const std::string& root, const std::string& dict, const std::string& out_dir,
                       const std::string& out_name) {
  if (out_name.empty() || out_name.find('/') != std::string::npos || out_name == "." || out_name == "..")
    throw error("--out '" + out_name + "' is not a file name (the file goes in --out-dir)");
  struct stat st {};
  if (::stat(out_dir.c_str(), &st) != 0) throw error(errno_message("--out-dir " + out_dir, errno));
  if (!S_ISDIR(st.st_mode)) throw error("--out-dir " + out_dir + " is not a directory");
  const std::string out = out_dir + "/" + out_name;
  check_output_of(dict, out);
  char* dir_real = ::realpath(out_dir.c_str(), nullptr);
  char* root_real = ::realpath(root.c_str(), nullptr);
  const std::string d = dir_real ? dir_real : "", r = root_real ? root_real : "";
  std::free(dir_real);
  std::free(root_real);
  if (!d.empty() && !r.empty() && (d == r || (d.size() > r.size() && d.compare(0, r.size(), r) == 0 &&
                                               (r == "/" || d[r.size()] == '/'))))
    throw error("the output " + out + " would be inside the tree " + root +
                " that grep searches (it would count, or empty, its own output): name an --out-dir outside it");
}

}  // namespace

int grep_command::run() {
  return errors_reported("deepwell grep", [&]() -> int {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    auto since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
    if (check && !server.empty())
      throw error("grep: --check scans the tree on this host, which --server does not (compare with an in-process "
                  "run's output instead)");
    if (server.empty()) check_grep_output(root, dict, out_dir, out_name);
    grep_options o;
    o.server = server;
    o.root = root;
    o.out_dir = out_dir;
    o.out_name = out_name;
    o.workers = workers;
    o.cache.page_size = page_size;
    o.fsync = fsync;
    o.service_threads = service_threads;
    o.service_slots = service_slots;
    o.blocks_per_sm = blocks_per_sm;
    o.piece_bytes = piece_bytes;
    o.spin_wait = spin_wait;
    o.sample_threads = sample_threads;
    o.profile_service = profile_service;
    o.reply_poll_ns = reply_poll_ns;
    (void)grep_piece_size(o);  // a bad size is named before anything starts
    // The GPU starts while the dictionary and the file list load.
    std::optional<gpu_warmup> gpu;
    if (!cpu) gpu.emplace(spin_wait);
    uint64_t too_long = 0;
    const grep_dictionary d = load_grep_dictionary(dict);
    const double dict_s = since(start);
    if (gpu) gpu->require();  // before the tree is listed: that may take a while
    auto step = clock::now();
    const std::vector<std::string> files = list_grep_files(o, &too_long);
    const double list_s = since(step);
    step = clock::now();
    const double context_s = gpu ? gpu->context_seconds() : 0;  // from `start`
    const double context_wait_s = since(step);
    step = clock::now();
    const grep_report r = cpu ? run_grep_cpu(o, d, files) : run_grep_gpu(o, d, files);
    const double call_s = since(step), command_s = since(start);
    std::printf("%s: %llu files, %llu bytes, %llu matches of %zu words (%llu dictionary lines dropped), %llu lines "
                "in %s/%s, %.3f s (%.2f GB/s; search %.3f s, the output's close %.3f s)%s\n",
                cpu ? "cpu" : "gpu", (unsigned long long)r.counters.files, (unsigned long long)r.counters.bytes,
                (unsigned long long)r.counters.matches, d.words.size(), (unsigned long long)d.dropped,
                (unsigned long long)r.counters.lines, out_dir.c_str(), out_name.c_str(), r.seconds,
                r.seconds > 0 ? double(r.counters.bytes) / r.seconds / 1e9 : 0.0, r.search_seconds, r.close_seconds,
                too_long ? (", " + std::to_string(too_long) + " paths too long, skipped").c_str() : "");
    int rc = 0;
    if (r.counters.failed) {
      const unsigned long long at = r.counters.last_path;
      const std::string which = at == 0 ? out_dir + "/" + out_name : at <= files.size() ? root + "/" + files[at - 1] : "?";
      std::fprintf(stderr, "grep: %llu file operations failed (the last: %s of %s, errno %d: %s)\n",
                   (unsigned long long)r.counters.failed, grep_call_name(r.counters.last_call), which.c_str(),
                   r.counters.last_err, std::strerror(r.counters.last_err));
      rc = 1;
    }
    bool same = true;
    if (check) {
      const grep_counts got = parse_grep_output(out_dir + "/" + out_name);
      const grep_counts want = reference_grep(root, d, files);
      same = got == want;
      std::printf("check against a plain scan: %s (%zu word-file pairs here, %zu there)\n", same ? "equal" : "DIFFERENT",
                  got.size(), want.size());
      if (!same) rc = 1;
    }
    if (!json.empty()) {
      const file_system_stats& fs = r.input;
      nlohmann::ordered_json js = {
          {"tool", "deepwell grep"}, {"clients", cpu ? "cpu" : "gpu"}, {"server", !server.empty()}, {"files", r.counters.files},
          {"bytes", r.counters.bytes}, {"matches", r.counters.matches}, {"words", d.words.size()},
          {"seconds", r.seconds}, {"search_seconds", r.search_seconds}, {"close_seconds", r.close_seconds},
          {"open_seconds", r.open_seconds}, {"report_seconds", r.report_seconds},
          {"output_bytes", r.output_bytes}, {"failed", r.counters.failed},
          {"file_system",
           {{"requests", fs.requests}, {"service_threads", r.service_threads}, {"service_s", fs.service_ns / 1e9},
            {"lock_wait_s", fs.lock_wait_ns / 1e9}, {"open_calls_s", fs.open_calls_ns / 1e9},
            {"syscalls_s", fs.syscalls_ns / 1e9}, {"seen_to_reply_s", fs.seen_to_reply_ns / 1e9},
            {"passes", fs.passes}, {"pass_s", fs.pass_ns / 1e9},
            {"locked_s", fs.locked_ns / 1e9},
            {"after_lock_s", fs.after_lock_ns / 1e9}}},
          {"workers", r.workers}, {"resident_workers", r.resident_workers}, {"piece_bytes", grep_piece_size(o)},
          // The longest one worker took over a file or a piece (open to close), and its bytes.
          {"slowest_item", {{"us", r.counters.slowest >> 24}, {"kib", r.counters.slowest & 0xffffff}}}};
      if (profile_service)
        js["file_system"].update({{"open_calls_cpu_s", fs.open_calls_cpu_ns / 1e9},
                                  {"open_calls_sleeps", fs.open_calls_sleeps},
                                  {"open_calls_preempted", fs.open_calls_preempted},
                                  {"open_calls_faults", fs.open_calls_faults},
                                  {"locked_opens_s", fs.locked_opens_ns / 1e9},
                                  {"locked_others_s", fs.locked_others_ns / 1e9},
                                  {"window_target_s", fs.window_target_ns / 1e9},
                                  {"client_calls", fs.client_calls}, {"client_slot_s", fs.client_slot_ns / 1e9},
                                  {"client_wait_s", fs.client_wait_ns / 1e9}, {"client_read_s", fs.client_read_ns / 1e9},
                                  {"client_slot_polls", fs.client_slot_polls},
                                  {"client_slot_waits", fs.client_slot_waits}});
      // The host's threads during the search, by name: on a CPU, and
      // runnable but waiting for one (a service short of cores).
      for (const thread_time& t : r.threads)
        js["host_threads"][t.name] = {{"threads", t.threads}, {"cpu_s", t.cpu_ns / 1e9},
                                      {"runqueue_s", t.runqueue_ns / 1e9}, {"slices", t.slices}};
      const machine_cpu_time& m = r.machine;  // 10 ms ticks: coarse over a fraction of a second
      js["machine_cpu_s"] = {{"user", m.user},   {"system", m.system},   {"idle", m.idle}, {"iowait", m.iowait},
                             {"irq", m.irq},     {"softirq", m.softirq}, {"steal", m.steal}};
      for (const auto& [where, n] : r.thread_samples) js["thread_samples"][where] = n;
      for (int k = 0; k < grep_phases; ++k) js["worker_seconds"][grep_phase_name(k)] = r.counters.phase_ns[k] / 1e9;
      js["checked"] = checked_json(check, same);
      // Where the command's own time went, in order (the process's start
      // and its exit come on top): the dictionary, the GPU's probe and
      // context (on a thread of their own from the start), the file list,
      // waiting for the context, the run's setup, its timed `seconds`, and
      // the run's teardown (its memory freed, its file systems and cache
      // ended); --check's scan comes after and is not counted here.
      js["steps_seconds"] = {{"dictionary", dict_s},
                             {"gpu_probe_from_start", gpu ? gpu->probe_seconds() : 0.0},
                             {"gpu_context_from_start", context_s},
                             {"list", list_s},
                             {"context_wait", context_wait_s},
                             {"setup", r.setup_seconds},
                             {"run", r.seconds + r.report_seconds},
                             {"teardown", call_s - r.setup_seconds - r.seconds - r.report_seconds},
                             {"command", command_s}};
      append_json(json, js);
    }
    return rc;
  });
}

}  // namespace deepwell::tools
