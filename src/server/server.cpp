// The server's event loop: one thread that accepts clients, answers their
// requests (wire.hpp) and reclaims what they leave behind. Requests are
// set-up (hello, lookup, queue pairs): the data path is the queue pairs,
// which the controller's pollers serve; so one thread is plenty, and it
// never blocks on a client (non-blocking sockets; a client that does not
// read its replies is dropped). The exception is the file API's tree ops
// (system calls that may wait on a disk): worker threads run them, and the
// loop thread sends their replies.
#include "deepwell/server/server.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepwell/controller/controller.hpp"
#include "deepwell/targets/checksummed_target.hpp"
#include "deepwell/targets/drive_array.hpp"
#include "deepwell/targets/nvme_passthrough.hpp"
#include "common/fork_join.hpp"
#include "common/unique_fd.hpp"
#include "targets/local_tree.hpp"
#include "targets/section_target.hpp"
#include "deepwell/common/error.hpp"
#include "targets/host_tier.hpp"
#include "deepwell/protocol/shared_region.hpp"
#include "protocol/wire.hpp"
#include "metrics_http.hpp"
#include "prometheus_text.hpp"
#include "server_log.hpp"

namespace deepwell::server {

static_assert(wire::right_read == access_grants::read && wire::right_write == access_grants::write,
              "the wire carries access_grants' bits");

namespace {

constexpr uint32_t max_clients = 1024;

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

// Closes descriptors on a thread of its own. A descriptor a client sent
// (which the protocol does not allow) may be on a FUSE or network file
// whose close waits for a daemon: the server thread must not.
class fd_closer {
 public:
  fd_closer() : thread_([this] { run(); }) {}
  ~fd_closer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void close_later(int fd) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fds_.push_back(fd);
    }
    cv_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<int> fds_;
  bool done_ = false;
  std::thread thread_;
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [this] { return done_ || !fds_.empty(); });
      std::vector<int> now;
      now.swap(fds_);
      lock.unlock();
      for (int fd : now) close(fd);
      lock.lock();
      if (done_ && fds_.empty()) return;
    }
  }
};

// At most one log line a second for a kind of event a client can cause at
// will (refused connections): a flood must not become a flood of logs.
struct log_limiter {
  std::chrono::steady_clock::time_point last{};
  uint64_t quiet = 0;  // events not logged since the last line
  void line(const std::string& text) {
    const auto now = std::chrono::steady_clock::now();
    if (last != std::chrono::steady_clock::time_point{} && now - last < std::chrono::seconds(1)) {
      ++quiet;
      return;
    }
    log_line(text + (quiet ? " (and " + std::to_string(quiet) + " more like it in the last second or so)" : ""));
    last = now;
    quiet = 0;
  }
};

// Lines a uid's connections cause by coming and going, at most a burst of
// 64 and 8 a second after it per uid: a program's lanes connecting
// together are all logged, a connect-and-close loop is counted, not
// written (it wrote 64 MB of log in 5 s). Kept for uids seen lately only.
class uid_log_limiter {
 public:
  void line(uint32_t uid, const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (buckets_.size() > 4096) buckets_.clear();  // many uids at once: start afresh rather than grow
    bucket& b = buckets_[uid];
    if (b.last == std::chrono::steady_clock::time_point{}) b.tokens = burst;
    b.tokens = std::min(burst, b.tokens + std::chrono::duration<double>(now - b.last).count() * per_second);
    b.last = now;
    if (b.tokens < 1) {
      ++b.quiet;
      return;
    }
    b.tokens -= 1;
    log_line(text + (b.quiet ? " (" + std::to_string(b.quiet) + " lines of uid " + std::to_string(uid) +
                                   "'s connections not logged before it: too many at once)"
                             : std::string()));
    b.quiet = 0;
  }

 private:
  static constexpr double burst = 64, per_second = 8;
  struct bucket {
    std::chrono::steady_clock::time_point last{};
    double tokens = 0;
    uint64_t quiet = 0;
  };
  std::mutex mutex_;
  std::unordered_map<uint32_t, bucket> buckets_;
};

// What all of one uid's connections hold, against the per-uid limits.
struct uid_usage {
  uint32_t clients = 0;
  uint32_t queue_pairs = 0;
  uint64_t staging_bytes = 0;
  uint32_t trees = 0;  // tree sessions open
  uint64_t tree_files = 0, tree_dirs = 0;  // reserved by them
};

// A tree session a client holds (controller_link::open_tree): its files
// and directories, on a namespace of the server's pool.
struct tree_hold {
  std::shared_ptr<tree_session> session;
  std::shared_ptr<target> windows;
  uint32_t files = 0, dirs = 0;  // reserved from the uid's limits
  // What another connection of the same uid shows to join the session
  // (join_tree: a program's service threads each send batches on a
  // connection of their own), and the connections that joined.
  uint64_t key[2] = {0, 0};
  std::vector<int> lanes;
};

// Connections that may join one tree session: a program's service threads,
// with room to spare.
constexpr size_t tree_lanes_max = 16;

// A tree batch on its way through a worker: the client (its socket, and
// its id, as the socket may be another client's by the time it is done),
// the request, the session it runs in.
struct tree_job {
  uint32_t client = 0;
  uint32_t uid = 0;  // whose turn it takes (uid_workers: round robin over uids)
  int fd = -1;
  wire::header h{};
  std::shared_ptr<tree_session> session;
  std::vector<tree_call> calls;
  std::string failure;  // the session failed (its ops are not answered)
  void run() {
    try {
      session->run(calls.data(), uint32_t(calls.size()));
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
};

// A section's mapping checked against its sums before it is handed out
// (map_dataset): all of the section read, 0.25 s a GiB.
struct mapping_check {
  uint32_t client = 0;
  uint32_t uid = 0;
  int fd = -1;
  wire::header h{};
  uint32_t nsid = 0;
  std::shared_ptr<target> data;  // the section's target (the section may be reclaimed meanwhile)
  bool passed = false;
  void run() {
    try {
      passed = data->map_readonly() != nullptr;
    } catch (const std::exception&) {
      passed = false;
    }
  }
};

// Threads that run a client's slow requests off the loop thread: tree
// batches (their opens, stats, closes: system calls that may wait on the
// disk), several at once, as a program's own file API runs them on its
// service threads; mapping checks. A job done goes back to the loop
// (finished(), after a byte on `wake`), which replies: only the loop
// thread writes to clients' sockets. Jobs wait in a queue per uid, taken
// in turn: a uid with 64 connections' jobs queued holds another uid's job
// behind one of its own, not behind all 64.
template <class Job>
class uid_workers {
 public:
  uid_workers(unsigned n, int wake) : wake_(wake) {
    for (unsigned k = 0; k < n; ++k) threads_.emplace_back([this] { work(); });
  }
  ~uid_workers() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  void submit(Job j) {
    {
      std::lock_guard<std::mutex> l(m_);
      std::deque<Job>& q = queued_[j.uid];
      if (q.empty()) turns_.push_back(j.uid);
      q.push_back(std::move(j));
    }
    cv_.notify_one();
  }
  std::vector<Job> finished() {
    std::lock_guard<std::mutex> l(m_);
    return std::exchange(done_, {});
  }

 private:
  void work() {
    std::unique_lock<std::mutex> l(m_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !turns_.empty(); });
      if (turns_.empty()) return;  // stopping, nothing left
      const uint32_t uid = turns_.front();
      turns_.pop_front();
      const auto q = queued_.find(uid);
      Job j = std::move(q->second.front());
      q->second.pop_front();
      if (q->second.empty())
        queued_.erase(q);
      else
        turns_.push_back(uid);  // its next batch after every other uid's
      l.unlock();
      j.run();
      l.lock();
      const bool first = done_.empty();
      done_.push_back(std::move(j));
      if (first) (void)!write(wake_, "t", 1);  // the loop drains every finished job on one wake-up
    }
  }
  int wake_;
  std::mutex m_;
  std::condition_variable cv_;
  std::map<uint32_t, std::deque<Job>> queued_;  // by uid, none empty
  std::deque<uint32_t> turns_;                   // uids with a job queued, in turn
  std::vector<Job> done_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

struct dataset_state {
  const dataset_config* cfg = nullptr;
  uint32_t nsid = 0;
  std::shared_ptr<target> data;
  shared_region memory;  // memory datasets: a memfd, so clients can map it (the direct tier)
  std::string real;      // files: the resolved path (lookups by path), resolved once at start
  // Whole-file datasets read without O_DIRECT: a read-only descriptor
  // opened at start, reopened (never the path again) for map_dataset, so a
  // file swapped under the dataset's path later is never handed out.
  int mappable_fd = -1;
  uint64_t bytes = 0;
  bool writable = false;
};

// A section's identity: its request, and for a writable one its uid.
using section_key = std::tuple<uint32_t, uint64_t, uint64_t, uint32_t, bool, int, uint64_t, uint64_t, uint32_t, int64_t>;

// A section a client made (controller_link::open_section): a namespace of
// its own over a range of a dataset. It stays after the connections that
// hold it have gone (the same request later gets it again, sums already
// read), until its namespace, its maker's count or its maker's sums
// memory is wanted for another (reclaim_idle_section).
struct section_state {
  uint32_t nsid = 0;
  const dataset_state* dataset = nullptr;
  section_request req;
  section_key key;
  std::shared_ptr<target> data;
  uint32_t maker_uid = 0;
  // Whom it counts against (section_usage): each uid whose connections
  // hold it (opened it and are still there), by how many; when none do,
  // the uid that held it last, until it is held again or reclaimed. So a
  // uid that holds another's shared section carries it, and cannot pin
  // the maker's count by holding the maker's sections.
  std::map<uint32_t, uint32_t> holding;  // uid -> its connections holding it
  uint32_t idle_uid = 0;
  std::chrono::steady_clock::time_point idle_since{};
  // Handing out a checked section's mapping checks all of it: once it
  // passed, it is not checked again; after it did not, not again for a
  // while (a client asking over and over must not keep the server's thread
  // checking).
  bool mapping_checked = false;
  bool mapping_checking = false;  // a check is with the workers
  std::chrono::steady_clock::time_point mapping_refused{};
};

// What a uid's sections take (config.hpp says why).
struct section_usage {
  uint32_t sections = 0;  // kept now (held or idle)
  uint32_t building = 0;  // being made on a worker (section_build), with their sums
  uint64_t building_sums = 0;
  // Requests refused after work began (reading sums) in the last
  // refusal_window: they count against the limit too, so that repeating
  // one is bounded, yet a uid is not shut out for good by old failures.
  uint32_t refused = 0;
  std::chrono::steady_clock::time_point refused_since{};
  uint64_t sums_bytes = 0;
  // Bytes of sections whose mapping was checked against their sums (on
  // the loop thread, 0.25 s a GiB) in the current window: at most
  // map_check_budget a window, or one section whatever its size. Past it
  // a mapping waits for the next window, and the client reads through its
  // queues meanwhile (20 requests for the mappings of 900 MiB sections
  // held every other client's requests 280 ms each).
  uint64_t map_checked = 0;
  std::chrono::steady_clock::time_point map_window{};
};
// A section whose sums are read (fixed sums: all of them at once, up to
// 128 MiB) is made on a worker, not the loop thread: one such open held
// every other client's requests 175 ms. The loop made its checks and
// reserved the uid's count and sums for it; it adds the namespace when
// the worker is done (reply_to_section_builds).
struct section_build {
  uint32_t client = 0;
  uint32_t uid = 0;
  int fd = -1;
  wire::header h{};
  section_request req;
  section_key key;
  const struct dataset_state* dataset = nullptr;
  std::shared_ptr<target> over;   // the dataset's target
  std::shared_ptr<target> built;  // the section's, once made
  std::string failure;
  void run() {
    try {
      built = detail::make_section_target(over, req);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
};

constexpr uint64_t map_check_budget = 2ull << 30;
constexpr auto refusal_window = std::chrono::seconds(60);
constexpr auto map_check_window = std::chrono::seconds(10);

struct client_state {
  int fd = -1;
  uint32_t id = 0;
  std::string name;
  uint32_t uid = 0, gid = 0;
  int32_t pid = 0;
  std::vector<uint32_t> gids;
  std::shared_ptr<access_grants> grants;
  client_share share;
  std::map<uint32_t, std::shared_ptr<queue_pair>> queues;
  std::map<uint32_t, tree_hold> trees;  // by nsid
  // Sessions of another connection of this uid that this one joined (by nsid).
  std::map<uint32_t, std::shared_ptr<tree_session>> joined;
  std::vector<uint32_t> sections;  // nsids of the sections it holds (opened)
  uint64_t staging_bytes = 0;
  bool said_hello = false;
  // It sent a request while its last reply was unread: not read from again
  // until it has read that reply (looked at on a timer, see run()).
  bool stalled = false;
  bool operator_view = false;  // may see every client and dataset (stats, dump)
  // A tree batch of its is with the workers: not read from until its reply
  // is sent (one request in flight per connection, as for every request).
  bool busy = false;
  uint64_t requests = 0, refused = 0;
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
};

struct server::impl {
  server_config cfg;
  std::vector<dataset_state> datasets;
  std::map<uint32_t, section_state> sections;  // by nsid
  std::map<section_key, uint32_t> section_index;
  std::map<uint32_t, section_usage> section_use;  // by uid
  std::atomic<uint64_t> sections_reclaimed{0};
  // Tree datasets (no namespace of their own), and the namespaces of
  // ended tree sessions, reset and kept for the next.
  std::vector<const dataset_config*> trees;
  // Each tree's directory, opened once at start: sessions open beneath
  // these, never the path again (whoever may write a parent could swap
  // the tree for a link to `/` after the config was read).
  std::map<const dataset_config*, detail::unique_fd> tree_roots;
  // Whether sessions open files with their client's rights (a server with
  // CAP_SETUID and CAP_SETGID: root); without, with the server's own.
  bool trees_as_clients = false;
  // Every session has all of its namespace's windows: a client whose cache
  // saw the namespace before starts above the windows it used then
  // (file_system), since pages of theirs may still be in its cache.
  std::vector<std::pair<uint32_t, std::shared_ptr<target>>> tree_pool;
  uint32_t tree_namespaces = 0;  // made so far (in sessions or the pool)
  static constexpr uint32_t tree_namespace_reserve = 128;  // namespaces sections leave to tree sessions
  // Descriptors tree sessions' files and directories may hold, counted as
  // they open and close: half the server's RLIMIT_NOFILE in all (the rest
  // is for sockets, queue pairs' memfds, engines) and half of that for one
  // uid, so that one user's opens cannot take the descriptors the server
  // needs for everyone else. An open past either is EMFILE for that op.
  int64_t tree_fd_budget = 512;
  std::shared_ptr<std::atomic<int64_t>> tree_fds_left = std::make_shared<std::atomic<int64_t>>(512);
  std::map<uint32_t, std::shared_ptr<std::atomic<int64_t>>> tree_fd_shares;  // by uid, kept while the server runs
  std::map<uint32_t, int> tree_owners;  // a session's nsid -> its owner's socket
  // Tree batches with the workers, by session (nsid); and sessions ended
  // while some were: their namespaces are reset and pooled once the last
  // is done (a batch still running may attach a file to a window).
  std::map<uint32_t, uint32_t> tree_batches;
  std::map<uint32_t, std::shared_ptr<target>> trees_ending;
  std::unique_ptr<uid_workers<tree_job>> workers;  // made with the wake pipe
  std::unique_ptr<uid_workers<mapping_check>> checkers;
  std::unique_ptr<uid_workers<section_build>> builders;
  uint32_t sections_building = 0;  // their namespaces are spoken for
  std::unique_ptr<controller> ctl;
  std::shared_ptr<host_tier> tier;  // the shared host-memory tier (host_cache), if any
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::atomic<bool> stopping{false};
  mutable std::mutex mutex;  // clients (the loop changes them; stats read them)
  std::map<int, std::unique_ptr<client_state>> clients;  // by socket
  std::map<uint32_t, uid_usage> usage;                   // by uid, while it has connections
  int reserve_fd = -1;  // spent to accept and close a connection when descriptors run out
  log_limiter refusals;
  uid_log_limiter comings;  // connects and disconnects (loop thread)
  fd_closer closer;
  // Clients that left: how many, and the last few with their counters (a
  // run's totals after its client is gone; bounded, a server runs for months).
  struct departed_client {
    uint32_t id;
    std::string name;
    client_counters counters;
  };
  static constexpr size_t departed_kept = 16;
  uint64_t departed_count = 0;
  std::deque<departed_client> departed;
  uint32_t next_client = 1;
  bool ids_wrapped = false;  // next_client has passed 2^32: ids in use are skipped
  uint64_t total_clients = 0;
  uint64_t staging_total = 0;  // queue pair memory of every client (max_staging_total)
  std::unique_ptr<metrics_http> metrics;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  void open_datasets();
  void bind_socket();
  void accept_clients();
  void serve(client_state& c);
  void drop(int fd, const char* why);
  wire::message handle(client_state& c, const wire::message& m);
  wire::message dataset_reply(const client_state& c, const dataset_state& d, uint16_t op) const;
  const dataset_state* visible(const client_state& c, uint32_t nsid) const;
  section_state* visible_section(const client_state& c, uint32_t nsid);
  wire::message section_reply(const client_state& c, const section_state& sec) const;
  // A dataset reply's route: who serves it and with which I/O backend.
  std::string served_by() const {
    return "deepwell serve at " + cfg.socket_path + " (" + ctl->backend_name() + (tier ? ", a host-memory tier" : "") + ")";
  }
  std::optional<wire::message> open_section(client_state& c, const wire::message& m);
  wire::message finish_section(client_state& c, const section_request& q, const section_key& key,
                               const dataset_state* d, std::shared_ptr<target> built);
  void reply_to_section_builds();
  void hold_section(client_state& c, section_state& sec);
  void release_sections(client_state& c);
  bool reclaim_idle_section(std::optional<uint32_t> uid, uint32_t keep);
  void charge(uint32_t uid, const section_request& q, int sign);
  wire::message open_tree(client_state& c, const wire::message& m);
  std::optional<wire::message> queue_tree_ops(client_state& c, const wire::message& m);
  void reply_to_tree_batches();
  bool queue_mapping_check(client_state& c, const wire::message& m);
  void reply_to_mapping_checks();
  wire::message section_mapping(const section_state& sec) const;
  void pool_tree_namespace(uint32_t nsid, std::shared_ptr<target> windows);
  wire::message join_tree(client_state& c, const wire::message& m);
  std::shared_ptr<tree_session> session_of(const client_state& c, uint32_t nsid) const;
  void end_tree(client_state& c, uint32_t nsid);
  void leave_tree(client_state& c, uint32_t nsid);
  void reply(client_state& c, const wire::header& request, wire::message r);
  uint8_t rights_of(const client_state& c, const dataset_config& d) const;
  bool has_a_grant(const client_state& c) const;
  void grant(client_state& c);
  bool is_operator(const client_state& c) const;
  void refuse_connection(int fd, uint32_t uid, const std::string& why);
  std::string stats_json(const client_state* viewer = nullptr) const;
  std::string prometheus() const;
};

// ---------------------------------------------------------------------------
// Start-up

void server::impl::open_datasets() {
  controller_config cc;
  cc.pollers = cfg.pollers;
  cc.io_budget_bytes = cfg.io_budget_bytes;
  cc.latency_target = cfg.latency_target;
  if (!cfg.poller_spin_us) cfg.poller_spin_us = std::getenv("DEEPWELL_POLLER_SPIN_US") ? cc.spin_us : 1000;
  cc.spin_us = *cfg.poller_spin_us;
  // No io_uring fixed buffers over clients' staging: registering a queue
  // pins all of its memory at once, so a client that made queue pairs it
  // never used had the server allocate and pin gigabytes (and each queue
  // made or dropped registered every queue again, on the pollers).
  cc.register_buffers = false;
  ctl = std::make_unique<controller>(cc);
  trees_as_clients = detail::can_act_as_others();
  if (!cfg.max_staging_total)
    cfg.max_staging_total = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE)) / 2;
  auto where = [this](const dataset_config& d) {
    return cfg.source + ":" + std::to_string(d.line) + ": dataset " + d.name + ": ";
  };
  // Open every dataset first: the host tier is shared out among the file
  // and device datasets in proportion to their sizes.
  std::vector<dataset_state> opened;
  uint64_t tiered_bytes = 0;
  for (const dataset_config& d : cfg.datasets) {
    if (d.kind == dataset_config::kind_t::tree) {
      // A directory now; its files as clients open them (open_tree).
      detail::unique_fd fd(open(d.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (fd.get() < 0) throw error(where(d) + errno_message("tree " + d.path + " cannot be opened as a directory", errno));
      tree_roots[&d] = std::move(fd);
      trees.push_back(&d);
      log_line("dataset " + d.name + ": the tree " + d.path + ", " + (d.writable ? "read-write" : "read-only") +
               (trees_as_clients ? ", opened with each client's rights"
                                 : ", opened with the server's rights (it cannot take on its clients')"));
      continue;
    }
    dataset_state s;
    s.cfg = &d;
    try {
      if (d.kind == dataset_config::kind_t::memory) {
        // A read-only dataset is sealed against writes through any
        // descriptor but the server's own mapping; a writable one's inode
        // is the server user's alone (0600), so a reader's descriptor cannot
        // be reopened read-write.
        s.memory = shared_region::create(d.memory_bytes, "deepwell-dataset-" + d.name, !d.writable);
        s.data = wrap_host_memory(s.memory.data(), d.memory_bytes, d.writable);
      } else if (d.kind == dataset_config::kind_t::nvme) {
        nvme_options o;
        o.writable = d.writable;
        s.data = make_nvme_target(d.path, o);  // says in the log and in describe() which route it took
        s.real = real_path(d.path);
        tiered_bytes += s.data->size();
      } else if (!d.members.empty()) {
        // An array of drives (targets/drive_array.hpp): each member a file
        // or device of its own, opened as a file dataset would be.
        file_options fo;
        fo.direct = d.direct;
        fo.writable = d.writable;
        std::vector<std::shared_ptr<target>> members;
        check_distinct_members(d.members, d.kind == dataset_config::kind_t::stripe ? "stripe" : "mirror");
        for (const std::string& m : d.members) members.push_back(open_file_target(m, fo));
        if (d.kind == dataset_config::kind_t::stripe)
          s.data = make_striped_target(std::move(members), d.chunk);
        else
          s.data = make_mirrored_target(std::move(members));
        tiered_bytes += s.data->size();
      } else {
        file_options fo;
        fo.direct = d.direct;
        fo.writable = d.writable;
        fo.offset = d.offset;
        fo.length = d.length;
        s.data = open_file_target(d.path, fo);
        s.real = real_path(d.path);
        tiered_bytes += s.data->size();
        if (d.kind == dataset_config::kind_t::file && !d.direct && d.offset == 0) {
          s.mappable_fd = open(d.path.c_str(), O_RDONLY | O_CLOEXEC);
          struct stat st{};
          if (s.mappable_fd >= 0 && (fstat(s.mappable_fd, &st) != 0 || uint64_t(st.st_size) != s.data->size())) {
            close(s.mappable_fd);  // not the whole file: read through the queues
            s.mappable_fd = -1;
          }
        }
      }
    } catch (const std::exception& e) {
      throw error(where(d) + e.what());
    }
    opened.push_back(std::move(s));
  }
  if (cfg.host_cache_bytes && tiered_bytes) tier = host_tier::make(cfg.host_cache_bytes, cfg.host_cache_page);
  const uint64_t tier_page = cfg.host_cache_page;
  for (dataset_state& s : opened) {
    const dataset_config& d = *s.cfg;
    try {
      if (tier && d.kind != dataset_config::kind_t::memory) {
        // Its share of the tier, never more than its whole pages fill.
        const uint64_t size = s.data->size();
        const uint64_t share = uint64_t((long double)cfg.host_cache_bytes * size / tiered_bytes);
        const uint64_t bytes =
            std::min({std::max<uint64_t>(share, tier_page), size / tier_page * tier_page, tier->bytes_left()});
        if (bytes >= tier_page) s.data = tier->wrap(s.data, bytes);
      }
      s.nsid = ctl->add_namespace({s.data, d.block_size, !d.writable});
    } catch (const std::exception& e) {
      throw error(where(d) + e.what());
    }
    s.bytes = s.data->size();
    s.writable = d.writable;
    log_line("dataset " + d.name + ": namespace " + std::to_string(s.nsid) + ", " + s.data->describe() + ", " +
             std::to_string(s.bytes) + " bytes, " + (d.writable ? "read-write" : "read-only"));
    datasets.push_back(std::move(s));
  }
}

void server::impl::bind_socket() {
  const std::string& path = cfg.socket_path;
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path))
    throw error("socket path " + path + " is longer than " + std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  // The default's directory (/tmp/deepwell-UID) is made here, 0711: others
  // may reach a socket in it but not put one there.
  const std::string dir = path.substr(0, std::max<size_t>(1, path.rfind('/')));
  if (path == default_socket_path() && !std::getenv("XDG_RUNTIME_DIR") && mkdir(dir.c_str(), 0711) != 0 &&
      errno != EEXIST)
    throw error(errno_message("creating the socket's directory " + dir, errno));
  // Where someone else could have put the socket (or the directory), a
  // client reaching it might be reaching an impostor: refuse.
  struct stat ds{};
  if (lstat(dir.c_str(), &ds) != 0) throw error(errno_message("socket directory " + dir, errno));
  if (!S_ISDIR(ds.st_mode)) throw error("socket directory " + dir + " is not a directory (a symlink?): refusing to listen there");
  if (ds.st_uid != geteuid() && ds.st_uid != 0)
    throw error("socket directory " + dir + " belongs to uid " + std::to_string(ds.st_uid) +
                ", not to the server's user or root: refusing to listen there");
  if ((ds.st_mode & 0022) && !(ds.st_mode & S_ISVTX))
    throw error("socket directory " + dir + " may be written by others (mode " + [&] {
      char m[8];
      std::snprintf(m, sizeof m, "%o", unsigned(ds.st_mode & 07777));
      return std::string(m);
    }() + ") and is not sticky: anyone could replace the socket; pick another");
  struct stat st{};
  if (lstat(path.c_str(), &st) == 0) {
    if (st.st_uid != geteuid())
      throw error("socket path " + path + " exists and belongs to uid " + std::to_string(st.st_uid) +
                  ", not to the server's user: someone may be squatting it; remove it or pick another");
    if (!S_ISSOCK(st.st_mode)) throw error("socket path " + path + " exists and is not a socket: remove it or pick another");
    // A socket: is a server listening there?
    const int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    const bool live = probe >= 0 && ::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    if (probe >= 0) close(probe);
    if (live) throw error("socket path " + path + ": another deepwell server is listening there");
    if (unlink(path.c_str()) != 0) throw error(errno_message("removing the stale socket " + path, errno));
    log_line("replaced a stale socket at " + path + " (a server that did not stop cleanly)");
  }
  listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd < 0) throw error(errno_message("socket", errno));
  if (bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    throw error(errno_message("bind " + path, errno));
  // Anyone may connect: the grants (by the kernel's word on who they are)
  // decide what they get, and a client with none gets nothing.
  chmod(path.c_str(), 0666);
  if (listen(listen_fd, 128) != 0) throw error(errno_message("listen " + path, errno));
}

// ---------------------------------------------------------------------------
// Clients

void server::impl::grant(client_state& c) {
  c.grants = std::make_shared<access_grants>();
  for (const dataset_state& d : datasets) c.grants->set(d.nsid, rights_of(c, *d.cfg));
  for (const share_config& s : cfg.shares) {
    if (s.who.matches(c.uid, c.gids)) {  // the first that matches
      c.share = client_share{s.weight, s.rate_bytes};
      break;
    }
  }
  ctl->set_client_share(c.id, c.share);
}

bool server::impl::is_operator(const client_state& c) const {
  if (c.uid == 0 || c.uid == geteuid()) return true;
  for (const principal& p : cfg.operators)
    if (p.matches(c.uid, c.gids)) return true;
  return false;
}

void server::impl::refuse_connection(int fd, uint32_t uid, const std::string& why) {
  refusals.line("refused a connection from uid " + std::to_string(uid) + ": " + why);
  close(fd);
}

void server::impl::accept_clients() {
  // A turn takes a bounded number of connections: the clients already
  // connected are served between turns, however fast others knock.
  for (int turn = 0; turn < 64; ++turn) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: the pending connection would keep the
        // listener readable and the loop spinning. Spend the reserve to
        // take it and close it, and say so once a second at most.
        // (accept fails with EMFILE before it looks for a connection: none
        // may be waiting at all.)
        if (reserve_fd >= 0) {
          close(reserve_fd);
          reserve_fd = -1;
          const int c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
          const int e = errno;
          if (c >= 0) close(c);
          reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
          if (c < 0) {
            if (e != EAGAIN && e != EWOULDBLOCK) refusals.line(errno_message("accept", e));
            return;
          }
          refusals.line("refused a connection: the server is out of descriptors (" + std::to_string(clients.size()) +
                        " clients)");
          continue;
        }
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) refusals.line(errno_message("accept", errno));
      return;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      refusals.line(errno_message("SO_PEERCRED", errno) + ": connection refused");
      close(fd);
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (clients.size() >= max_clients) {
      refuse_connection(fd, cred.uid, std::to_string(max_clients) + " clients already");
      continue;
    }
    uid_usage& u = usage[cred.uid];
    if (u.clients >= cfg.max_clients_per_uid) {
      refuse_connection(fd, cred.uid, "it has " + std::to_string(u.clients) + " connections, the limit (max_clients_per_uid)");
      continue;
    }
    ++u.clients;
    auto c = std::make_unique<client_state>();
    c->fd = fd;
    // Ids name share accounts and tree replies: after 2^32 connections
    // they wrap, past 0 and past any still in use.
    // (Before the first wrap every id is new: no scan.)
    if (next_client == 0) ids_wrapped = true;
    for (bool used = ids_wrapped; used;) {
      if (next_client == 0) ++next_client;
      used = false;
      for (const auto& [_, other] : clients) used |= other->id == next_client;
      if (used) ++next_client;
    }
    c->id = next_client++;
    c->uid = cred.uid;
    c->gid = cred.gid;
    c->pid = cred.pid;
    c->gids.push_back(cred.gid);
    // Supplementary groups, where the kernel tells them (Linux 4.13+).
    gid_t groups[256];
    socklen_t glen = sizeof(groups);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0)
      for (size_t i = 0; i < glen / sizeof(gid_t); ++i) c->gids.push_back(groups[i]);
    grant(*c);
    c->operator_view = is_operator(*c);
    ++total_clients;
    clients[fd] = std::move(c);
  }
}

// A client left (or broke the protocol): its queue pairs go (the
// controller drops each once the commands it fetched are done).
void server::impl::drop(int fd, const char* why) {
  std::unique_ptr<client_state> c;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = clients.find(fd);
    if (it == clients.end()) return;
    c = std::move(it->second);
    clients.erase(it);
  }
  release_sections(*c);
  for (auto& [qid, qp] : c->queues) ctl->delete_queue_pair(qid);
  while (!c->joined.empty()) leave_tree(*c, c->joined.begin()->first);
  while (!c->trees.empty()) end_tree(*c, c->trees.begin()->first);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto u = usage.find(c->uid);
    if (u != usage.end()) {
      u->second.queue_pairs -= uint32_t(c->queues.size());
      u->second.staging_bytes -= c->staging_bytes;
      if (--u->second.clients == 0) usage.erase(u);
    }
    staging_total -= c->staging_bytes;
    ++departed_count;
    departed.push_back({c->id, c->said_hello ? c->name : "", ctl->client_stats(c->id)});
    if (departed.size() > departed_kept) departed.pop_front();
  }
  ctl->forget_client(c->id);
  comings.line(c->uid, "client " + std::to_string(c->id) + " (" + (c->said_hello ? c->name : "no hello") + ", uid " +
                          std::to_string(c->uid) + ", pid " + std::to_string(c->pid) + ") " + why + ": " +
                          std::to_string(c->queues.size()) + " queue pair(s) reclaimed");
  close(fd);
}

void server::impl::serve(client_state& c) {
  wire::message m;
  bool got = false;
  // Descriptors a client sent (the protocol has none) are closed on the
  // closer's thread, never here: closing a FUSE or network file may wait.
  std::vector<int> sent_fds;
  try {
    got = wire::receive_message(c.fd, m, &sent_fds);
  } catch (const error& e) {
    for (int fd : sent_fds) closer.close_later(fd);
    // Client-caused lines go through the uid's limiter: a loop of malformed
    // messages wrote 3.4 MB of log a second.
    comings.line(c.uid, "client " + std::to_string(c.id) + ": " + e.what());
    drop(c.fd, "broke the protocol");
    return;
  }
  if (!sent_fds.empty()) {  // that ends the connection
    for (int fd : sent_fds) closer.close_later(fd);
    drop(c.fd, "sent a descriptor");
    return;
  }
  if (!got) {
    drop(c.fd, "disconnected");
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);  // stats read the client's fields from other threads
    ++c.requests;
  }
  if (c.said_hello && wire::op(m.h.op) == wire::op::tree_ops) {
    // Answered when a worker has run it (reply_to_tree_batches).
    if (std::optional<wire::message> refused = queue_tree_ops(c, m)) reply(c, m.h, std::move(*refused));
    return;
  }
  // Answered when a worker has checked the section (reply_to_mapping_checks).
  if (c.said_hello && wire::op(m.h.op) == wire::op::map_dataset && queue_mapping_check(c, m)) return;
  // Answered now, or when a worker has read its sums (reply_to_section_builds).
  if (c.said_hello && wire::op(m.h.op) == wire::op::open_section) {
    std::optional<wire::message> r;
    try {
      r = open_section(c, m);
    } catch (const std::exception& e) {  // as handle()'s: the controller refused
      r = wire::message{};
      r->h.status = int32_t(wire::status::failed);
      r->text = e.what();
    }
    if (r) reply(c, m.h, std::move(*r));
    return;
  }
  wire::message r;
  try {
    r = handle(c, m);
  } catch (const std::exception& e) {  // the controller refused (bad geometry, out of memory)
    r = wire::message{};
    r.h.status = int32_t(wire::status::failed);
    r.text = e.what();
  }
  reply(c, m.h, std::move(r));
}

// Sends a request's reply; a client that does not take it is dropped
// (so c may be gone on return).
void server::impl::reply(client_state& c, const wire::header& request, wire::message r) {
  if (r.h.status != 0) {
    std::lock_guard<std::mutex> lock(mutex);
    ++c.refused;
  }
  r.h.op = request.op;
  r.h.seq = request.seq;
  const int fd = r.fd;
  bool sent = false;
  try {
    sent = wire::send_message(c.fd, std::move(r));
  } catch (const error& e) {  // ETOOMANYREFS, ENOBUFS...: this client's trouble, not the server's
    comings.line(c.uid, "client " + std::to_string(c.id) + ": " + e.what());
  }
  if (fd >= 0) close(fd);  // the client has its own now
  if (!sent) drop(c.fd, "stopped reading its replies");
}

namespace {
wire::message refuse(wire::status s, std::string text) {
  wire::message r;
  r.h.status = int32_t(s);
  r.text = std::move(text);
  return r;
}

// A text reply whole: in the message, or where it is longer than one, in a
// sealed memfd the client reads (wire::long_text). Past long_text_max, or
// where no memfd can be made, a refusal that says so: never text cut short.
wire::message text_reply(std::string text, const char* what) {
  wire::message r;
  if (text.size() <= wire::max_text) {
    r.text = std::move(text);
    return r;
  }
  if (text.size() > wire::long_text_max)
    return refuse(wire::status::limit, std::string(what) + " is " + std::to_string(text.size()) + " bytes, past " +
                                           std::to_string(wire::long_text_max));
  const int fd = memfd_create("deepwell-reply", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return refuse(wire::status::failed, errno_message(std::string("a memfd for ") + what, errno));
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      const int e = errno;
      close(fd);
      return refuse(wire::status::failed, errno_message(std::string("writing ") + what + " to a memfd", e));
    }
    done += size_t(n);
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  r.fd = fd;
  r.h.c = wire::long_text;
  r.h.x = text.size();
  return r;
}
}  // namespace

const dataset_state* server::impl::visible(const client_state& c, uint32_t nsid) const {
  if (nsid == 0 || nsid > datasets.size()) return nullptr;
  if (c.grants->of(nsid) == access_grants::none) return nullptr;
  return &datasets[nsid - 1];
}

section_state* server::impl::visible_section(const client_state& c, uint32_t nsid) {
  if (c.grants->of(nsid) == access_grants::none) return nullptr;
  auto it = sections.find(nsid);
  return it == sections.end() ? nullptr : &it->second;
}

wire::message server::impl::section_reply(const client_state& c, const section_state& sec) const {
  wire::message r;
  r.h.a = sec.nsid;
  r.h.b = sec.req.block_size;
  r.h.c = sec.req.writable ? 0 : 1;
  r.h.d = c.grants->of(sec.nsid);
  r.h.x = sec.req.bytes;
  r.h.y = (sec.req.bytes + sec.req.block_size - 1) / sec.req.block_size;
  r.text = sec.dataset->cfg->name + ": " + sec.data->describe() + "\n" + served_by();
  return r;
}

namespace {

// Server memory a section's sums take (config.hpp: max_section_sums_per_uid),
// from fields the client sent, before they are checked (a block of 0 is
// refused later; here it is too much).
uint64_t sums_memory(const section_request& q) {
  if (q.sums == sums_kind::none) return 0;
  if (q.sum_block == 0) return UINT64_MAX;
  const uint64_t bytes = checksum_region_bytes(q.bytes, q.sum_block);
  if (q.sums == sums_kind::kept) return bytes;
  // Fixed: the file's copy (the mapping's check), the store the checked
  // target reads them from, and the checked target's own.
  return bytes > UINT64_MAX / 3 ? UINT64_MAX : 3 * bytes;
}

}  // namespace

// A client's rights on a dataset (a namespace's or a tree's), as the
// config's grants give them.
uint8_t server::impl::rights_of(const client_state& c, const dataset_config& d) const {
  uint8_t r = access_grants::none;
  for (const grant_config& g : cfg.grants) {
    if (g.dataset != "*" && g.dataset != d.name) continue;
    if (!g.who.matches(c.uid, c.gids)) continue;
    r |= access_grants::read;
    if (g.write && d.writable) r |= access_grants::write;
  }
  return r;
}

// Queue pairs are for reading what a client was granted: one with no
// grant at all gets none (its queues' memory would be the server's to hold).
bool server::impl::has_a_grant(const client_state& c) const {
  for (const dataset_state& d : datasets)
    if (c.grants->of(d.nsid) != access_grants::none) return true;
  for (const dataset_config* t : trees)
    if (rights_of(c, *t) != access_grants::none) return true;
  return false;
}

// Every field is the client's: the tree's name and rights are checked
// against the grants, the sizes against the server's limits.
wire::message server::impl::open_tree(client_state& c, const wire::message& m) {
  const dataset_config* d = nullptr;
  for (const dataset_config* t : trees)
    if (t->name == m.text && rights_of(c, *t) != access_grants::none) d = t;
  if (!d)
    return refuse(wire::status::not_found, "no tree '" + m.text.substr(0, 256) + "' is offered to uid " +
                                               std::to_string(c.uid) + " (`deepwell stat` lists what the server has; the grants are in its config)");
  const bool writable = m.h.b != 0;
  if (m.h.b > 1) return refuse(wire::status::bad_request, "open_tree: writable must be 0 or 1");
  if (writable && !(rights_of(c, *d) & access_grants::write))
    return refuse(wire::status::denied, "the tree " + d->name + " is read-only for uid " + std::to_string(c.uid) +
                                            (d->writable ? " (its grant is read-only)" : " (writable = false in the config)"));
  if (m.h.c == 0 || m.h.d == 0) return refuse(wire::status::bad_request, "open_tree: no files or no directories asked for");
  {
    std::lock_guard<std::mutex> lock(mutex);
    const uid_usage& u = usage[c.uid];
    if (u.trees >= cfg.max_trees_per_uid)
      return refuse(wire::status::limit, "uid " + std::to_string(c.uid) + " has " + std::to_string(u.trees) +
                                             " tree sessions open, the limit (max_trees_per_uid)");
    if (u.tree_files + m.h.c > cfg.max_tree_files_per_uid || u.tree_dirs + m.h.d > cfg.max_tree_dirs_per_uid)
      return refuse(wire::status::limit,
                    "a tree session of " + std::to_string(m.h.c) + " files and " + std::to_string(m.h.d) +
                        " directories would take uid " + std::to_string(c.uid) + " past its limits (" +
                        std::to_string(u.tree_files) + " of max_tree_files_per_uid " + std::to_string(cfg.max_tree_files_per_uid) +
                        ", " + std::to_string(u.tree_dirs) + " of max_tree_dirs_per_uid " +
                        std::to_string(cfg.max_tree_dirs_per_uid) + " held)");
  }
  tree_hold t;
  uint32_t nsid = 0;
  if (!tree_pool.empty()) {
    nsid = tree_pool.back().first;
    t.windows = std::move(tree_pool.back().second);
    tree_pool.pop_back();
    detail::reset_tree_windows(*t.windows, d->path);
  } else {
    t.windows = detail::make_tree_windows(d->path);
    try {
      nsid = ctl->add_namespace({t.windows, 512, false});
    } catch (const std::exception& e) {
      return refuse(wire::status::limit, std::string("the server has no namespace left for a tree session: ") + e.what());
    }
    ++tree_namespaces;
  }
  if (getrandom(t.key, sizeof t.key, 0) != sizeof t.key) {
    tree_pool.emplace_back(nsid, std::move(t.windows));
    return refuse(wire::status::failed, errno_message("getrandom for a tree session's key", errno));
  }
  tree_request q;
  q.name = d->path;
  q.writable = writable;
  q.max_open = t.files = m.h.c;
  q.max_dirs = t.dirs = m.h.d;
  auto quota = std::make_shared<detail::descriptor_quota>();
  auto& share = tree_fd_shares[c.uid];
  if (!share) share = std::make_shared<std::atomic<int64_t>>(tree_fd_budget / 2);
  quota->pools = {share, tree_fds_left};
  try {
    std::shared_ptr<detail::fs_identity> as;
    if (trees_as_clients) {
      as = std::make_shared<detail::fs_identity>();
      as->uid = c.uid;
      as->gid = c.gid;
      as->groups.assign(c.gids.begin(), c.gids.end());
    }
    t.session = detail::make_local_tree(q, t.windows, nsid, detail::tree_first_window, /*for_server=*/true, quota,
                                        tree_roots.at(d).get(), std::move(as));
  } catch (const std::exception& e) {
    tree_pool.emplace_back(nsid, std::move(t.windows));
    return refuse(wire::status::failed, "the tree " + d->name + ": " + e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    uid_usage& u = usage[c.uid];
    ++u.trees;
    u.tree_files += t.files;
    u.tree_dirs += t.dirs;
  }
  c.grants->set(nsid, writable ? uint8_t(access_grants::read | access_grants::write) : access_grants::read);
  wire::message r;
  r.h.a = nsid;
  r.h.b = t.session->first_window();
  r.h.c = t.session->windows();
  r.h.d = writable ? 1 : 0;
  r.h.x = t.key[0];
  r.h.y = t.key[1];
  r.text = "the tree " + d->name + " of " + served_by();
  c.trees[nsid] = std::move(t);
  tree_owners[nsid] = c.fd;
  return r;
}

std::shared_ptr<tree_session> server::impl::session_of(const client_state& c, uint32_t nsid) const {
  if (const auto it = c.trees.find(nsid); it != c.trees.end()) return it->second.session;
  if (const auto it = c.joined.find(nsid); it != c.joined.end()) return it->second;
  return nullptr;
}

std::optional<wire::message> server::impl::queue_tree_ops(client_state& c, const wire::message& m) {
  std::shared_ptr<tree_session> session = session_of(c, m.h.a);
  if (!session) return refuse(wire::status::not_found, "no tree session " + std::to_string(m.h.a) + " of this client");
  tree_job j{c.id, c.uid, c.fd, m.h, std::move(session), std::vector<tree_call>(tree_batch_max), {}};
  std::string why;
  if (!wire::unpack_tree_request(m.text, m.h.b, j.calls.data(), why)) return refuse(wire::status::bad_request, "tree_ops: " + why);
  j.calls.resize(m.h.b);
  ++tree_batches[m.h.a];
  c.busy = true;
  workers->submit(std::move(j));
  return std::nullopt;
}

// Batches the workers have run: each answered if its client is still
// there (the same client: its socket may be another's now), and a session
// ended meanwhile gets its namespace back in the pool with its last.
void server::impl::reply_to_tree_batches() {
  for (tree_job& j : workers->finished()) {
    const uint32_t nsid = j.h.a;
    if (auto b = tree_batches.find(nsid); b != tree_batches.end() && --b->second == 0) {
      tree_batches.erase(b);
      if (auto e = trees_ending.find(nsid); e != trees_ending.end()) {
        std::shared_ptr<target> windows = std::move(e->second);
        trees_ending.erase(e);
        pool_tree_namespace(nsid, std::move(windows));
      }
    }
    const auto it = clients.find(j.fd);
    if (it == clients.end() || it->second->id != j.client) continue;  // it left
    client_state& c = *it->second;
    c.busy = false;
    wire::message r;
    if (!session_of(c, nsid))
      r = refuse(wire::status::not_found, "tree session " + std::to_string(nsid) + " ended");
    else if (!j.failure.empty())
      r = refuse(wire::status::failed, "tree_ops: " + j.failure);
    else
      r.text = wire::pack_tree_reply(j.calls.data(), uint32_t(j.calls.size()));
    reply(c, j.h, std::move(r));
  }
}

// A read-only section of a whole-file dataset read without O_DIRECT: the
// file's descriptor and the section's range, once its own target has
// handed out its mapping (a checked section: once all of it is in memory
// and matched its sums); else no mapping, and the client reads through
// its queues.
wire::message server::impl::section_mapping(const section_state& sec) const {
  wire::message r;
  const dataset_state* d = sec.dataset;
  struct stat st{};
  if (!sec.mapping_checked || sec.req.writable || d->mappable_fd < 0 || fstat(d->mappable_fd, &st) != 0 ||
      uint64_t(st.st_size) != d->bytes)
    return r;
  const std::string self = "/proc/self/fd/" + std::to_string(d->mappable_fd);
  r.fd = open(self.c_str(), O_RDONLY | O_CLOEXEC);
  if (r.fd >= 0) {
    r.h.a = uint32_t(wire::map_kind::file);
    r.h.x = sec.req.bytes;
    r.h.y = sec.req.offset;
  }
  return r;
}

// A mapping asked of a section not yet checked goes to a worker (reading
// all of it, 0.25 s a GiB, held every other client's requests when the
// loop thread did it), within the uid's budget: map_check_budget bytes a
// window, or one section whatever its size. One check a section at a
// time; after one that did not pass, none for a while (a client asking
// over and over must not keep a worker reading). Otherwise the request is
// answered at once (handle), without a mapping if there is none yet.
bool server::impl::queue_mapping_check(client_state& c, const wire::message& m) {
  if (!m.h.b || c.trees.count(m.h.a)) return false;
  section_state* sec = visible_section(c, m.h.a);
  if (!sec || sec->mapping_checked || sec->mapping_checking || sec->req.writable || sec->dataset->mappable_fd < 0)
    return false;
  const auto now = std::chrono::steady_clock::now();
  if (sec->mapping_refused != std::chrono::steady_clock::time_point{} && now - sec->mapping_refused < std::chrono::seconds(10))
    return false;
  section_usage& use = section_use[c.uid];
  if (now - use.map_window >= map_check_window) use.map_window = now, use.map_checked = 0;
  if (use.map_checked && use.map_checked + sec->req.bytes > map_check_budget) return false;
  use.map_checked += sec->req.bytes;
  sec->mapping_checking = true;
  c.busy = true;
  checkers->submit(mapping_check{c.id, c.uid, c.fd, m.h, sec->nsid, sec->data, false});
  return true;
}

void server::impl::reply_to_mapping_checks() {
  for (mapping_check& j : checkers->finished()) {
    // The section may have been reclaimed meanwhile (its id another's).
    const section_state* sec = nullptr;
    if (auto it = sections.find(j.nsid); it != sections.end() && it->second.data == j.data) {
      section_state& s = it->second;
      s.mapping_checking = false;
      s.mapping_checked = j.passed;
      if (!j.passed) s.mapping_refused = std::chrono::steady_clock::now();
      sec = &s;
    }
    const auto it = clients.find(j.fd);
    if (it == clients.end() || it->second->id != j.client) continue;  // it left
    client_state& c = *it->second;
    c.busy = false;
    reply(c, j.h, sec && visible_section(c, j.nsid) == sec ? section_mapping(*sec) : wire::message{});
  }
}

void server::impl::pool_tree_namespace(uint32_t nsid, std::shared_ptr<target> windows) {
  detail::reset_tree_windows(*windows, "");
  tree_pool.emplace_back(nsid, std::move(windows));
}

// Another connection of the session's uid, with its key: its batches run
// like the owner's. What it cannot do: end the session (its close_tree
// only leaves it), map the session's namespace or read its windows (its
// queue pairs have no grant on them).
wire::message server::impl::join_tree(client_state& c, const wire::message& m) {
  const auto refused = [&] {
    return refuse(wire::status::not_found, "no tree session " + std::to_string(m.h.a) + " of uid " + std::to_string(c.uid) +
                                               " with that key");
  };
  const auto owner = tree_owners.find(m.h.a);
  if (owner == tree_owners.end()) return refused();
  if (owner->second == c.fd) return refuse(wire::status::bad_request, "join_tree: this connection holds the session");
  if (c.joined.count(m.h.a)) return refuse(wire::status::bad_request, "join_tree: joined already");
  const auto o = clients.find(owner->second);
  if (o == clients.end() || o->second->uid != c.uid) return refused();
  tree_hold& t = o->second->trees.at(m.h.a);
  // Compared in full whatever differs (a key is not guessed byte by byte).
  if (((t.key[0] ^ m.h.x) | (t.key[1] ^ m.h.y)) != 0) return refused();
  if (t.lanes.size() >= tree_lanes_max)
    return refuse(wire::status::limit, "tree session " + std::to_string(m.h.a) + " has " + std::to_string(t.lanes.size()) +
                                           " connections joined, the limit");
  t.lanes.push_back(c.fd);
  c.joined[m.h.a] = t.session;
  return {};
}

// A joined connection leaves its session (close_tree, or it left).
void server::impl::leave_tree(client_state& c, uint32_t nsid) {
  if (!c.joined.erase(nsid)) return;
  const auto owner = tree_owners.find(nsid);
  if (owner == tree_owners.end()) return;
  const auto o = clients.find(owner->second);
  if (o == clients.end()) return;
  const auto t = o->second->trees.find(nsid);
  if (t == o->second->trees.end()) return;
  auto& lanes = t->second.lanes;
  lanes.erase(std::remove(lanes.begin(), lanes.end(), c.fd), lanes.end());
}

// The session's end: no grant on its namespace any more, its files closed
// as their windows let them go, the namespace reset and kept for the next.
void server::impl::end_tree(client_state& c, uint32_t nsid) {
  auto it = c.trees.find(nsid);
  if (it == c.trees.end()) return;
  c.grants->set(nsid, access_grants::none);
  tree_hold t = std::move(it->second);
  c.trees.erase(it);
  tree_owners.erase(nsid);
  for (int fd : t.lanes)
    if (const auto l = clients.find(fd); l != clients.end()) l->second->joined.erase(nsid);
  t.session.reset();
  if (tree_batches.count(nsid))
    trees_ending[nsid] = std::move(t.windows);
  else
    pool_tree_namespace(nsid, std::move(t.windows));
  std::lock_guard<std::mutex> lock(mutex);
  auto u = usage.find(c.uid);
  if (u != usage.end() && u->second.trees) {
    --u->second.trees;
    u->second.tree_files -= t.files;
    u->second.tree_dirs -= t.dirs;
  }
}

// Every field is the client's: checked here (grants, limits) and by
// make_section_target (ranges, sizes) before anything is made.
std::optional<wire::message> server::impl::open_section(client_state& c, const wire::message& m) {
  section_request q;
  q.dataset = m.h.a;
  q.block_size = m.h.b;
  q.writable = (m.h.c & 1u) != 0;
  q.sum_block = m.h.d;
  q.offset = m.h.x;
  q.bytes = m.h.y;
  if ((m.h.c & ~0xff01u) != 0 || m.text.size() != 16)
    return refuse(wire::status::bad_request, "open_section: malformed request");
  const uint32_t kind = m.h.c >> 8;
  if (kind > uint32_t(sums_kind::kept)) return refuse(wire::status::bad_request, "open_section: unknown kind of sums");
  q.sums = sums_kind(kind);
  std::memcpy(&q.sums_offset, m.text.data(), 8);
  std::memcpy(&q.sums_bytes, m.text.data() + 8, 8);
  if (q.sums == sums_kind::none) q.sums_offset = q.sums_bytes = 0, q.sum_block = 0;
  // Sections of datasets only (not of sections): the dataset's grant decides.
  const dataset_state* d = visible(c, q.dataset);
  if (!d) return refuse(wire::status::not_found, "no dataset namespace " + std::to_string(q.dataset) + " for this client");
  const uint8_t rights = c.grants->of(d->nsid);
  if (q.writable && !(rights & access_grants::write))
    return refuse(wire::status::denied, "dataset " + d->cfg->name + " is not writable by uid " + std::to_string(c.uid));
  const section_key key{q.dataset,   q.offset,      q.bytes,         q.block_size, q.writable,
                        int(q.sums), q.sums_offset, q.sums_bytes,    q.sum_block,  q.writable ? int64_t(c.uid) : -1};
  section_usage& use = section_use[c.uid];
  const auto now = std::chrono::steady_clock::now();
  if (now - use.refused_since >= refusal_window) use.refused = 0;
  const auto existing = section_index.find(key);
  section_state* found = existing == section_index.end() ? nullptr : &sections.at(existing->second);
  // What holding it adds to the uid's count and sums: nothing when it
  // counts against the uid already (held by another of its connections,
  // or idle and last held by it).
  const bool counted = found && (found->holding.count(c.uid) || (found->holding.empty() && found->idle_uid == c.uid));
  if (!counted) {
    // Past a limit, the uid's own sections that no connection holds make
    // room, the longest idle first (never the one asked for).
    const uint32_t keep = found ? found->nsid : 0;
    const auto counted_now = [&] { return use.sections + use.building + use.refused; };
    while (counted_now() >= cfg.max_sections_per_uid && reclaim_idle_section(c.uid, keep)) {
    }
    if (counted_now() >= cfg.max_sections_per_uid)
      return refuse(wire::status::limit, "uid " + std::to_string(c.uid) + " holds " +
                                             std::to_string(use.sections + use.building) + " sections and had " +
                                             std::to_string(use.refused) +
                                             " refused in the last minute, the limit (max_sections_per_uid)");
    const uint64_t sums = sums_memory(q);
    const auto sums_left = [&] {
      const uint64_t held = use.sums_bytes + use.building_sums;
      return cfg.max_section_sums_per_uid - std::min(held, cfg.max_section_sums_per_uid);
    };
    while (sums > sums_left() && reclaim_idle_section(c.uid, keep)) {
    }
    if (sums > sums_left())
      return refuse(wire::status::limit, "the section's sums would take " + std::to_string(sums) +
                                             " bytes of the server's memory, past uid " + std::to_string(c.uid) +
                                             "'s limit of " + std::to_string(cfg.max_section_sums_per_uid) +
                                             " (max_section_sums_per_uid)");
  }
  if (found) {
    hold_section(c, *found);
    c.grants->set(found->nsid, q.writable ? uint8_t(access_grants::read | access_grants::write) : access_grants::read);
    return section_reply(c, *found);
  }
  // Sections may take the namespaces but those kept for tree sessions, so
  // that sections many uids made leave the file API working.
  const auto full = [&] {
    const uint32_t tree_made = tree_namespaces, tree_kept = std::max(tree_made, tree_namespace_reserve);
    return ctl->namespace_count() + sections_building + (tree_kept - tree_made) >= controller::max_namespaces;
  };
  while (full() && reclaim_idle_section(std::nullopt, 0)) {
  }
  if (full())
    return refuse(wire::status::limit, "the server has no namespace left for a section (" +
                                           std::to_string(controller::max_namespaces) + " in all, " +
                                           std::to_string(tree_namespace_reserve) +
                                           " of them kept for tree sessions; every section is held by a connection)");
  try {
    detail::check_section_request(*d->data, q);
  } catch (const error& e) {
    return refuse(wire::status::bad_request, std::string("open_section: ") + e.what());
  }
  if (q.sums != sums_kind::none) {
    // Its sums are read: on a worker, with the uid's count, sums and a
    // namespace reserved meanwhile.
    use.building += 1;
    use.building_sums += sums_memory(q);
    ++sections_building;
    c.busy = true;
    builders->submit(section_build{c.id, c.uid, c.fd, m.h, q, key, d, d->data, nullptr, {}});
    return std::nullopt;
  }
  std::shared_ptr<target> built;
  try {
    built = detail::make_section_target(d->data, q);
  } catch (const error& e) {
    return refuse(wire::status::bad_request, std::string("open_section: ") + e.what());
  }
  return finish_section(c, q, key, d, std::move(built));
}

// Sections made on a worker: the reservation given back, and the section
// added (or the failure counted) if its client is still there.
void server::impl::reply_to_section_builds() {
  for (section_build& j : builders->finished()) {
    section_usage& use = section_use[j.uid];
    use.building -= std::min<uint32_t>(use.building, 1);
    use.building_sums -= std::min(use.building_sums, sums_memory(j.req));
    --sections_building;
    const auto it = clients.find(j.fd);
    if (it == clients.end() || it->second->id != j.client) continue;  // it left: the target goes
    client_state& c = *it->second;
    c.busy = false;
    if (!j.failure.empty()) {
      // Refused after its sums were read: it counts, so that repeating it is bounded.
      if (use.refused++ == 0) use.refused_since = std::chrono::steady_clock::now();
      reply(c, j.h, refuse(wire::status::bad_request, "open_section: " + j.failure));
      continue;
    }
    wire::message r = finish_section(c, j.req, j.key, j.dataset, std::move(j.built));
    reply(c, j.h, std::move(r));
  }
}

// A section made: its namespace added, counted against the client's uid
// and held by the client. One made meanwhile by another connection (the
// same request) is taken instead.
wire::message server::impl::finish_section(client_state& c, const section_request& q, const section_key& key,
                                           const dataset_state* d, std::shared_ptr<target> built) {
  const uint8_t rights = q.writable ? uint8_t(access_grants::read | access_grants::write) : access_grants::read;
  if (auto it = section_index.find(key); it != section_index.end()) {
    section_state& sec = sections.at(it->second);
    hold_section(c, sec);
    c.grants->set(sec.nsid, rights);
    return section_reply(c, sec);
  }
  section_state sec;
  sec.data = std::move(built);
  try {
    sec.nsid = ctl->add_namespace({sec.data, q.block_size, !q.writable});
  } catch (const error& e) {
    return refuse(wire::status::limit, std::string("open_section: ") + e.what());
  }
  sec.dataset = d;
  sec.req = q;
  sec.key = key;
  sec.maker_uid = c.uid;
  sec.idle_uid = c.uid;
  charge(c.uid, sec.req, +1);  // hold_section moves it from idle to held
  section_index[key] = sec.nsid;
  const uint32_t nsid = sec.nsid;
  {
    std::lock_guard<std::mutex> lock(mutex);  // stats read the sections
    sections[nsid] = std::move(sec);
  }
  hold_section(c, sections.at(nsid));
  c.grants->set(nsid, rights);
  return section_reply(c, sections.at(nsid));
}

void server::impl::charge(uint32_t uid, const section_request& q, int sign) {
  section_usage& use = section_use[uid];
  const uint64_t sums = sums_memory(q);
  if (sign > 0) {
    use.sections += 1;
    use.sums_bytes += sums;
  } else {
    use.sections -= std::min<uint32_t>(use.sections, 1);
    use.sums_bytes -= std::min(use.sums_bytes, sums);
  }
}

void server::impl::hold_section(client_state& c, section_state& sec) {
  if (std::find(c.sections.begin(), c.sections.end(), sec.nsid) != c.sections.end()) return;
  c.sections.push_back(sec.nsid);
  if (sec.holding.empty()) charge(sec.idle_uid, sec.req, -1);  // idle no more
  if (sec.holding[c.uid]++ == 0) charge(c.uid, sec.req, +1);
}

// A connection that ends lets go of its sections: its grants on them go
// first (its queues, deleted but perhaps still fetching, may name them no
// more). A section no connection holds is idle from now on, and counts
// against the uid that held it last.
void server::impl::release_sections(client_state& c) {
  const auto now = std::chrono::steady_clock::now();
  for (uint32_t nsid : c.sections) {
    c.grants->set(nsid, access_grants::none);
    const auto it = sections.find(nsid);
    if (it == sections.end()) continue;
    section_state& sec = it->second;
    const auto h = sec.holding.find(c.uid);
    if (h == sec.holding.end() || --h->second != 0) continue;
    sec.holding.erase(h);
    if (sec.holding.empty()) {
      sec.idle_uid = c.uid;  // still counted against it
      sec.idle_since = now;
    } else {
      charge(c.uid, sec.req, -1);
    }
  }
  c.sections.clear();
}

// The section idle longest (last held by `uid`, or by anyone; never
// `keep`) goes: its namespace retired in the controller (its id taken
// again once no poller can hold it), its count and sums' memory given
// back. A client that asks for it again makes it anew.
bool server::impl::reclaim_idle_section(std::optional<uint32_t> uid, uint32_t keep) {
  auto oldest = sections.end();
  for (auto it = sections.begin(); it != sections.end(); ++it) {
    const section_state& sec = it->second;
    if (!sec.holding.empty() || sec.nsid == keep || (uid && sec.idle_uid != *uid)) continue;
    if (oldest == sections.end() || sec.idle_since < oldest->second.idle_since) oldest = it;
  }
  if (oldest == sections.end()) return false;
  const section_state& sec = oldest->second;
  const uint32_t nsid = sec.nsid;
  charge(sec.idle_uid, sec.req, -1);
  section_index.erase(sec.key);
  ctl->retire_namespace(nsid);
  {
    std::lock_guard<std::mutex> lock(mutex);  // stats read the sections
    sections.erase(oldest);
  }
  sections_reclaimed.fetch_add(1);
  return true;
}

wire::message server::impl::dataset_reply(const client_state& c, const dataset_state& d, uint16_t) const {
  wire::message r;
  r.h.a = d.nsid;
  r.h.b = d.cfg->block_size;
  r.h.c = d.writable ? 0 : 1;
  r.h.d = c.grants->of(d.nsid);
  r.h.x = d.bytes;
  r.h.y = (d.bytes + d.cfg->block_size - 1) / d.cfg->block_size;
  r.text = d.cfg->name + ": " + d.data->describe() + "\n" + served_by();
  return r;
}

wire::message server::impl::handle(client_state& c, const wire::message& m) {
  const auto o = wire::op(m.h.op);
  if (!c.said_hello && o != wire::op::hello) return refuse(wire::status::bad_request, "say hello first");
  switch (o) {
    case wire::op::hello: {
      if (c.said_hello) return refuse(wire::status::bad_request, "hello twice");
      c.said_hello = true;
      std::string name = m.text.substr(0, 128);
      for (char& ch : name)
        if (ch < 32 || ch > 126) ch = '?';  // it goes into logs and metrics labels
      {
        std::lock_guard<std::mutex> lock(mutex);
        c.name = std::move(name);
      }
      uint32_t n = 0;
      for (const dataset_state& d : datasets) n += c.grants->of(d.nsid) != access_grants::none;
      comings.line(c.uid, "client " + std::to_string(c.id) + " (" + c.name + ", uid " + std::to_string(c.uid) +
                              ", pid " + std::to_string(c.pid) + ") connected: " + std::to_string(n) +
                              " dataset(s) granted, weight " + std::to_string(c.share.weight));
      wire::message r;
      r.h.a = wire::version;
      r.h.b = c.id;
      r.text = "deepwell server";
      return r;
    }
    case wire::op::lookup: {
      for (const dataset_state& d : datasets) {
        if (c.grants->of(d.nsid) == access_grants::none) continue;
        // A path is compared as text: the client resolved it (server_link
        // does); the server walks no path a client names.
        if (d.cfg->name == m.text || (!d.real.empty() && (m.text == d.real || m.text == d.cfg->path)))
          return dataset_reply(c, d, m.h.op);
      }
      return refuse(wire::status::not_found, "no dataset '" + m.text + "' is offered to uid " + std::to_string(c.uid) +
                                                 " (`deepwell stat` lists what the server has; the grants are in its config)");
    }
    case wire::op::info: {
      if (const section_state* sec = visible_section(c, m.h.a)) return section_reply(c, *sec);
      if (const auto t = c.trees.find(m.h.a); t != c.trees.end()) {
        // The session's windows: a namespace of 512-byte blocks.
        wire::message r;
        r.h.a = m.h.a;
        r.h.b = 512;
        r.h.c = t->second.session->writable() ? 0 : 1;
        r.h.d = c.grants->of(m.h.a);
        r.h.x = t->second.windows->size();
        r.h.y = r.h.x / 512;
        r.text = t->second.session->describe() + "\n" + served_by();
        return r;
      }
      const dataset_state* d = visible(c, m.h.a);
      if (!d) return refuse(wire::status::not_found, "no namespace " + std::to_string(m.h.a) + " for this client");
      return dataset_reply(c, *d, m.h.op);
    }
    case wire::op::open_queue_pair: {
      qp_geometry g{m.h.a, m.h.b, m.h.c};
      auto pow2 = [](uint32_t v) { return v >= 2 && v <= 65536 && (v & (v - 1)) == 0; };
      if (!pow2(g.sq_entries) || !pow2(g.cq_entries) || g.slot_bytes == 0 || g.slot_bytes % 512 != 0 ||
          g.slot_bytes > (16u << 20))
        return refuse(wire::status::bad_request, "queue pair geometry: entries must be powers of two from 2 to 65536 "
                                                 "and the slot a multiple of 512 bytes up to 16 MiB");
      const uint64_t bytes = compute_layout(g).total_bytes;
      if (c.queues.size() >= cfg.max_queue_pairs)
        return refuse(wire::status::limit, "this client has " + std::to_string(c.queues.size()) +
                                               " queue pairs, the server's limit (max_queue_pairs)");
      if (c.staging_bytes + bytes > cfg.max_staging_bytes)
        return refuse(wire::status::limit, "queue pair memory would exceed this client's limit of " +
                                               std::to_string(cfg.max_staging_bytes) + " bytes (max_staging)");
      if (staging_total + bytes > cfg.max_staging_total)
        return refuse(wire::status::limit, "queue pair memory would exceed the server's limit of " +
                                               std::to_string(cfg.max_staging_total) +
                                               " bytes over every client (max_staging_total)");
      if (!has_a_grant(c))
        return refuse(wire::status::denied, "uid " + std::to_string(c.uid) +
                                                " has no grant on any dataset or tree of this server: no queue pair");
      uid_usage& u = usage[c.uid];
      if (u.queue_pairs >= cfg.max_queue_pairs_per_uid)
        return refuse(wire::status::limit, "uid " + std::to_string(c.uid) + " has " + std::to_string(u.queue_pairs) +
                                               " queue pairs over its connections, the limit (max_queue_pairs_per_uid)");
      if (u.staging_bytes + bytes > cfg.max_staging_per_uid)
        return refuse(wire::status::limit, "queue pair memory would exceed uid " + std::to_string(c.uid) +
                                               "'s limit of " + std::to_string(cfg.max_staging_per_uid) +
                                               " bytes over its connections (max_staging_per_uid)");
      std::shared_ptr<queue_pair> qp = ctl->create_queue_pair(g, queue_options{c.grants, c.id});
      std::lock_guard<std::mutex> lock(mutex);  // stats read the client's queues
      c.staging_bytes += bytes;
      staging_total += bytes;
      u.queue_pairs += 1;
      u.staging_bytes += bytes;
      c.queues[qp->id()] = qp;
      wire::message r;
      r.h.a = qp->id();
      r.h.x = qp->bytes();
      r.fd = dup(qp->memfd());
      if (r.fd < 0) throw error(errno_message("dup of a queue pair's memfd", errno));
      return r;
    }
    case wire::op::close_queue_pair: {
      auto it = c.queues.find(m.h.a);
      if (it == c.queues.end())
        return refuse(wire::status::not_found, "queue pair " + std::to_string(m.h.a) + " is not this client's");
      ctl->delete_queue_pair(it->first);
      std::lock_guard<std::mutex> lock(mutex);
      const uint64_t bytes = compute_layout(it->second->geometry()).total_bytes;
      c.staging_bytes -= bytes;
      staging_total -= bytes;
      uid_usage& u = usage[c.uid];
      u.queue_pairs -= 1;
      u.staging_bytes -= bytes;
      c.queues.erase(it);
      return {};
    }
    case wire::op::map_dataset: {
      if (c.trees.count(m.h.a)) return {};  // a tree's files are read through the queues (map_kind none)
      if (const section_state* sec = visible_section(c, m.h.a)) return m.h.b ? section_mapping(*sec) : wire::message{};
      const dataset_state* d = visible(c, m.h.a);
      if (!d) return refuse(wire::status::not_found, "no namespace " + std::to_string(m.h.a) + " for this client");
      wire::message r;
      r.h.x = d->bytes;
      const bool may_write = c.grants->of(d->nsid) & access_grants::write;
      if (d->memory.fd() >= 0) {
        // A read-only grant gets a read-only descriptor: it cannot map the
        // memory writable, whatever it asks of mmap.
        const std::string self = "/proc/self/fd/" + std::to_string(d->memory.fd());
        r.fd = open(self.c_str(), (may_write ? O_RDWR : O_RDONLY) | O_CLOEXEC);
        if (r.fd < 0) throw error(errno_message("reopening a memory dataset's memfd", errno));
        r.h.a = uint32_t(wire::map_kind::memory);
        r.h.b = may_write ? 1 : 0;
        return r;
      }
      // A file, for the direct tier: only when the dataset is the whole
      // file (a descriptor reads all of it) and not O_DIRECT.
      // The descriptor opened at start, reopened read-only (a description
      // of the client's own, never the path again).
      struct stat st{};
      if (m.h.b && d->mappable_fd >= 0 && fstat(d->mappable_fd, &st) == 0 && uint64_t(st.st_size) == d->bytes) {
        const std::string self = "/proc/self/fd/" + std::to_string(d->mappable_fd);
        r.fd = open(self.c_str(), O_RDONLY | O_CLOEXEC);
        if (r.fd >= 0) r.h.a = uint32_t(wire::map_kind::file);
      }
      return r;  // none: read it through the queues
    }
    case wire::op::map_tier: {
      // Any grant reads; a read-only descriptor of the dataset's own arena
      // (no other dataset's pages are in it), which cannot be mapped writable.
      // A section reads its dataset's tier through the controller: no arena.
      if (visible_section(c, m.h.a) || c.trees.count(m.h.a)) return {};
      const dataset_state* d = visible(c, m.h.a);
      if (!d) return refuse(wire::status::not_found, "no namespace " + std::to_string(m.h.a) + " for this client");
      wire::message r;
      const int fd = d->data->tier_fd();
      if (fd < 0) return r;  // no tier over this dataset
      const std::string self = "/proc/self/fd/" + std::to_string(fd);
      r.fd = open(self.c_str(), O_RDONLY | O_CLOEXEC);
      if (r.fd < 0) throw error(errno_message("reopening a host-tier arena's memfd", errno));
      struct stat st{};
      if (fstat(r.fd, &st) != 0) {
        close(r.fd);
        throw error(errno_message("fstat of a host-tier arena's memfd", errno));
      }
      r.h.x = uint64_t(st.st_size);
      return r;
    }
    case wire::op::open_section:  // serve() answers it (a worker may make it)
      return refuse(wire::status::bad_request, "open_section: say hello first");
    case wire::op::section_checks: {
      const section_state* sec = visible_section(c, m.h.a);
      if (!sec) return refuse(wire::status::not_found, "no section " + std::to_string(m.h.a) + " for this client");
      const section_checks k = detail::section_target_checks(*sec->data);
      wire::message r;
      r.h.x = k.mismatches;
      r.h.y = k.last_bad_block;
      return r;
    }
    case wire::op::set_verify: {
      const section_state* sec = visible_section(c, m.h.a);
      if (!sec) return refuse(wire::status::not_found, "no section " + std::to_string(m.h.a) + " for this client");
      if (!sec->req.writable || !(c.grants->of(sec->nsid) & access_grants::write))
        return refuse(wire::status::denied, "set_verify: section " + std::to_string(sec->nsid) +
                                                " is not writable by this client (its readers share it)");
      if (m.h.b > 1) return refuse(wire::status::bad_request, "set_verify: on is 0 or 1");
      detail::section_target_verify(*sec->data, m.h.b != 0);
      return {};
    }
    case wire::op::open_tree: return open_tree(c, m);
    case wire::op::tree_ops: return refuse(wire::status::failed, "tree_ops: not queued (a bug)");
    case wire::op::join_tree: return join_tree(c, m);
    case wire::op::close_tree:
      if (c.joined.count(m.h.a)) {
        leave_tree(c, m.h.a);
        return {};
      }
      if (!c.trees.count(m.h.a)) return refuse(wire::status::not_found, "no tree session " + std::to_string(m.h.a) + " of this client");
      end_tree(c, m.h.a);
      return {};
    case wire::op::dump:
      // Every queue pair of every client: an operator's view.
      if (!c.operator_view)
        return refuse(wire::status::denied, "dump shows every client's queues: uid " + std::to_string(c.uid) +
                                                " is not an operator of this server ([[operator]] in its config)");
      return text_reply(ctl->dump(), "the dump");
    case wire::op::stats:
      return text_reply(stats_json(c.operator_view ? nullptr : &c), "the stats");
    case wire::op::list: {
      std::string t;
      for (const dataset_state& d : datasets) {
        const uint8_t g = c.grants->of(d.nsid);
        if (g == access_grants::none) continue;
        t += std::to_string(d.nsid) + " " + d.cfg->name + " " + ((g & access_grants::write) ? "rw" : "r") + " " +
             std::to_string(d.bytes) + "\n";
      }
      return text_reply(std::move(t), "the list");
    }
  }
  return refuse(wire::status::bad_request, "unknown request " + std::to_string(m.h.op));
}

// ---------------------------------------------------------------------------
// Statistics

namespace {

nlohmann::json counters_json(const client_counters& k) {
  return {{"commands", k.commands},
          {"reads", k.reads},
          {"writes", k.writes},
          {"flushes", k.flushes},
          {"bytes_read", k.bytes_read},
          {"bytes_written", k.bytes_written},
          {"errors", k.errors},
          {"throttled", k.throttled},
          {"in_flight_bytes", k.in_flight_bytes},
          {"latency_us_p50", k.latency_percentile_us(0.50)},
          {"latency_us_p99", k.latency_percentile_us(0.99)},
          {"latency_us_p999", k.latency_percentile_us(0.999)}};
}

}  // namespace

// One connected client's entry (its counters, who it is, what it holds),
// the same in the operator's view and in the client's own.
static nlohmann::json client_json(const client_state& c, const client_counters& k) {
  nlohmann::json e = counters_json(k);
  e["id"] = c.id;
  e["name"] = c.name;
  e["uid"] = c.uid;
  e["pid"] = c.pid;
  e["weight"] = c.share.weight;
  e["rate_bytes"] = c.share.rate_bytes;
  e["queue_pairs"] = c.queues.size();
  e["staging_bytes"] = c.staging_bytes;
  e["requests"] = c.requests;
  e["refused"] = c.refused;
  return e;
}

// viewer: nullptr for an operator's view (everything); else a client's
// own view, which shows only what it was granted and itself: no other
// client, no dataset it cannot see, no server-wide totals (they would
// tell it what the others do).
std::string server::impl::stats_json(const client_state* viewer) const {
  nlohmann::json j;
  const double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // What both views show of the server and of a dataset.
  j["server"] = {{"socket", cfg.socket_path}, {"uptime_s", up}, {"backend", ctl->backend_name()}, {"pollers", cfg.pollers}};
  const auto dataset_json = [&](const dataset_state& d, bool writable) {
    return nlohmann::json{{"nsid", d.nsid},           {"name", d.cfg->name},   {"target", d.data->describe()},
                          {"route", served_by()},     {"bytes", d.bytes},      {"block_size", d.cfg->block_size},
                          {"writable", writable}};
  };
  j["datasets"] = nlohmann::json::array();
  if (viewer) {
    std::lock_guard<std::mutex> lock(mutex);
    const client_counters k = ctl->client_stats(viewer->id);
    j["server"].update({{"view", "client"},
                        {"queue_pairs", viewer->queues.size()},
                        {"commands", k.commands},
                        {"bytes_read", k.bytes_read},
                        {"bytes_written", k.bytes_written},
                        {"errors", k.errors}});
    for (const dataset_state& d : datasets) {
      const uint8_t g = viewer->grants->of(d.nsid);
      if (g != access_grants::none) j["datasets"].push_back(dataset_json(d, g & access_grants::write));
    }
    j["trees"] = nlohmann::json::array();
    for (const dataset_config* t : trees) {
      const uint8_t g = rights_of(*viewer, *t);
      if (g == access_grants::none) continue;
      j["trees"].push_back({{"name", t->name}, {"root", t->path}, {"writable", bool(g & access_grants::write)}});
    }
    j["clients"] = nlohmann::json::array({client_json(*viewer, k)});
    return j.dump(2);
  }
  const queue_counters t = ctl->total_counters();
  uint64_t clients_total = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);  // the loop counts clients as it accepts them
    clients_total = total_clients;
  }
  j["server"].update({{"view", "operator"},
                      {"io_budget_bytes", cfg.io_budget_bytes},
                      {"io_budget_now_bytes", ctl->io_budget_now()},
                      {"latency_target", cfg.latency_target},
                      {"poller_spin_us", cfg.poller_spin_us.value_or(0)},
                      {"poller_cpu_seconds", ctl->poller_cpu_seconds()},
                      {"latency_floor_us", double(ctl->latency_floor_ns()) / 1e3},
                      {"queue_pairs", ctl->queue_pair_count()},
                      {"sections", [&] {
                         std::lock_guard<std::mutex> lock(mutex);
                         return sections.size();
                       }()},
                      {"sections_reclaimed", sections_reclaimed.load()},
                      {"clients_total", clients_total},
                      {"client_accounts", ctl->client_account_count()},
                      {"commands", t.commands},
                      {"bytes_read", t.bytes_read},
                      {"bytes_written", t.bytes_written},
                      {"errors", t.errors}});
  if (tier) {
    const host_tier_stats h = tier->stats();
    const uint64_t n = h.hits + h.misses;
    j["host_tier"] = {{"bytes", h.capacity_pages * tier->page_bytes()},
                      {"resident_pages", h.resident_pages},
                      {"hits", h.hits},
                      {"misses", h.misses},
                      {"hit_rate", n ? double(h.hits) / double(n) : 0.0},
                      {"evictions", h.evictions},
                      {"invalidations", h.invalidations}};
  }
  for (const dataset_state& d : datasets) {
    nlohmann::json e = dataset_json(d, d.writable);
    e["latency_floor_us"] = double(ctl->latency_floor_ns(d.nsid)) / 1e3;
    j["datasets"].push_back(std::move(e));
  }
  j["trees"] = nlohmann::json::array();
  for (const dataset_config* t : trees) j["trees"].push_back({{"name", t->name}, {"root", t->path}, {"writable", t->writable}});
  j["clients"] = nlohmann::json::array();
  std::lock_guard<std::mutex> lock(mutex);
  uint64_t sessions = 0;
  for (const auto& [uid, u] : usage) sessions += u.trees;
  j["server"]["tree_sessions"] = sessions;
  for (const auto& [fd, c] : clients) {
    nlohmann::json e = client_json(*c, ctl->client_stats(c->id));
    nlohmann::json g = nlohmann::json::array();
    for (const dataset_state& d : datasets) {
      const uint8_t r = c->grants->of(d.nsid);
      if (r != access_grants::none) g.push_back(d.cfg->name + ((r & access_grants::write) ? ":rw" : ":r"));
    }
    e["grants"] = g;
    j["clients"].push_back(e);
  }
  j["departed_clients"] = departed_count;
  j["departed"] = nlohmann::json::array();
  for (const departed_client& d : departed) {
    nlohmann::json e = counters_json(d.counters);
    e["id"] = d.id;
    e["name"] = d.name;
    j["departed"].push_back(e);
  }
  return j.dump(2);
}

std::string server::impl::prometheus() const {
  prometheus_text o;
  const queue_counters t = ctl->total_counters();
  o.single("deepwell_commands_total", "counter", "Commands served, all clients.", t.commands);
  o.single("deepwell_bytes_read_total", "counter", "Bytes read, all clients.", t.bytes_read);
  o.single("deepwell_bytes_written_total", "counter", "Bytes written, all clients.", t.bytes_written);
  o.single("deepwell_errors_total", "counter", "Commands completed with an error status, all clients.", t.errors);
  o.single("deepwell_queue_pairs", "gauge", "Queue pairs being served.", uint64_t(ctl->queue_pair_count()));
  if (tier) {
    const host_tier_stats h = tier->stats();
    o.single("deepwell_host_tier_hits_total", "counter", "Requests served from the shared host-memory tier.", h.hits);
    o.single("deepwell_host_tier_misses_total", "counter", "Requests the host-memory tier sent to storage.", h.misses);
    o.single("deepwell_host_tier_resident_pages", "gauge", "Pages in the host-memory tier.", uint64_t(h.resident_pages));
  }
  if (cfg.metrics_detail) {
    o.family("deepwell_dataset_bytes", "gauge", "Size of each dataset.");
    for (const dataset_state& d : datasets) o.sample("deepwell_dataset_bytes", {{"dataset", d.cfg->name}}, d.bytes);
  }
  std::lock_guard<std::mutex> lock(mutex);
  o.family("deepwell_io_budget_bytes", "gauge",
           "Storage bytes in flight that clients share now (the latency target may hold it below io_budget, or a "
           "lone client's above).");
  o.sample("deepwell_io_budget_bytes", {}, ctl->io_budget_now());
  o.single("deepwell_clients", "gauge", "Connected clients.", uint64_t(clients.size()));
  // Who the clients are and what each does: only where the operator asked
  // (metrics_detail); anyone who can reach the port reads it.
  if (!cfg.metrics_detail) return o.text();
  struct row {
    metric_labels labels;
    client_counters k;
    size_t queues;
  };
  std::vector<row> rows;
  for (const auto& [fd, c] : clients)
    rows.push_back({{{"client", std::to_string(c->id)}, {"name", c->name}, {"uid", std::to_string(c->uid)}},
                    ctl->client_stats(c->id), c->queues.size()});
  auto per_client = [&](const char* name, const char* type, const char* help, auto value) {
    o.family(name, type, help);
    for (const row& r : rows) o.sample(name, r.labels, uint64_t(value(r)));
  };
  per_client("deepwell_client_commands_total", "counter", "Commands of a client.", [](const row& r) { return r.k.commands; });
  per_client("deepwell_client_bytes_read_total", "counter", "Bytes a client read.", [](const row& r) { return r.k.bytes_read; });
  per_client("deepwell_client_bytes_written_total", "counter", "Bytes a client wrote.",
             [](const row& r) { return r.k.bytes_written; });
  per_client("deepwell_client_errors_total", "counter", "A client's commands that failed.", [](const row& r) { return r.k.errors; });
  per_client("deepwell_client_throttled_total", "counter", "Times a client's command waited for its share.",
             [](const row& r) { return r.k.throttled; });
  per_client("deepwell_client_in_flight_bytes", "gauge", "A client's bytes in flight to storage.",
             [](const row& r) { return r.k.in_flight_bytes; });
  per_client("deepwell_client_queue_pairs", "gauge", "A client's queue pairs.", [](const row& r) { return r.queues; });
  // Latency as a histogram: bucket i of client_counters holds latencies
  // below 2^i us (the last one, everything above too).
  o.family("deepwell_client_latency_seconds", "histogram", "Read and write latency in the server, fetch to completion.");
  std::vector<double> bounds(client_counters::latency_buckets);
  for (int i = 0; i < client_counters::latency_buckets; ++i) bounds[i] = double(uint64_t(1) << i) * 1e-6;
  for (const row& r : rows)
    o.histogram("deepwell_client_latency_seconds", r.labels, bounds,
                std::vector<uint64_t>(std::begin(r.k.latency_us), std::end(r.k.latency_us)), double(r.k.latency_ns_sum) * 1e-9);
  return o.text();
}

// ---------------------------------------------------------------------------
// The loop

server::server(server_config cfg) : impl_(std::make_unique<impl>()) {
  impl& s = *impl_;
  s.cfg = std::move(cfg);
  // A root server must not hand anyone a file they could not open.
  if (const std::vector<std::string> w = widening_grants(s.cfg); !w.empty()) {
    std::string all;
    for (const std::string& line : w) all += (all.empty() ? "" : "\n") + line;
    throw config_error(all);
  }
  if (pipe2(s.wake, O_CLOEXEC | O_NONBLOCK) != 0) throw error(errno_message("pipe", errno));
  s.workers = std::make_unique<uid_workers<tree_job>>(detail::fork_join::default_helpers() + 1, s.wake[1]);
  s.checkers = std::make_unique<uid_workers<mapping_check>>(1, s.wake[1]);
  s.builders = std::make_unique<uid_workers<section_build>>(2, s.wake[1]);
  // Each client holds a socket and, while it reads a reply, a queue pair's
  // or dataset's descriptor: take the descriptors the hard limit allows.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  s.tree_fd_budget = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                         ? std::max<int64_t>(64, int64_t(rl.rlim_cur) / 2)
                         : int64_t(1) << 20;
  s.tree_fds_left->store(s.tree_fd_budget);
  s.reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  s.open_datasets();
  s.bind_socket();
  if (!s.cfg.metrics.empty())
    s.metrics = std::make_unique<metrics_http>(s.cfg.metrics, [p = &s] { return p->prometheus(); }, s.cfg.metrics_remote);
  log_line("serving " + std::to_string(s.datasets.size()) + " dataset(s) on " + s.cfg.socket_path + " (" +
           s.ctl->backend_name() + ", " + std::to_string(s.cfg.pollers) + " poller(s))" +
           (s.metrics ? ", metrics on port " + std::to_string(s.metrics->port()) : std::string()));
}

server::~server() {
  impl& s = *impl_;
  s.metrics.reset();
  std::vector<int> fds;
  for (auto& [fd, c] : s.clients) fds.push_back(fd);
  for (int fd : fds) s.drop(fd, "closed by the server");
  s.workers.reset();
  s.checkers.reset();
  s.builders.reset();
  if (s.ctl) s.ctl->stop();
  if (s.listen_fd >= 0) {
    close(s.listen_fd);
    unlink(s.cfg.socket_path.c_str());
  }
  close(s.wake[0]);
  close(s.wake[1]);
  if (s.reserve_fd >= 0) close(s.reserve_fd);
  for (dataset_state& d : s.datasets)
    if (d.mappable_fd >= 0) close(d.mappable_fd);
}

void server::stop() {
  impl_->stopping.store(true);
  const char x = 1;
  (void)!write(impl_->wake[1], &x, 1);  // async-signal-safe
}

namespace {
// Bytes of replies a client has not read yet. A client is answered one
// request at a time: while its last reply (perhaps carrying a descriptor)
// is unread, its next request waits. So a client holds at most one
// descriptor in flight, and one that never reads cannot pile them up
// against the server's own limit on descriptors in flight (ETOOMANYREFS).
int unread_reply_bytes(int fd) {
  int n = 0;
  return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : 0;
}
}  // namespace

void server::run() {
  impl& s = *impl_;
  std::vector<pollfd> fds;
  bool any_deferred = false;
  while (!s.stopping.load()) {
    fds.clear();
    fds.push_back({s.listen_fd, POLLIN, 0});
    fds.push_back({s.wake[0], POLLIN, 0});
    any_deferred = false;
    for (auto& [fd, c] : s.clients) {
      // A client that sent a request while its last reply was unread is
      // not read from until it has read that reply (POLLHUP and POLLERR
      // still come: a client that left is dropped). Others are polled for
      // their next request at once: an honest client reads each reply
      // before it sends again, so it never waits on the timer below.
      const bool unread = unread_reply_bytes(fd) > 0;
      if (!unread) c->stalled = false;
      const bool defer = unread && c->stalled;
      any_deferred |= defer;
      fds.push_back({fd, short(defer || c->busy ? 0 : POLLIN), 0});
    }
    // A deferred client is looked at again within 5 ms (nothing signals
    // that the peer read its queue).
    const int n = poll(fds.data(), fds.size(), any_deferred ? 5 : -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw error(errno_message("poll", errno));
    }
    if (fds[1].revents) {
      char buf[64];
      while (read(s.wake[0], buf, sizeof buf) > 0) {
      }
    }
    if (s.stopping.load()) break;
    // One message from each client that has one: a client flooding
    // requests waits its turn like the others.
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto it = s.clients.find(fds[i].fd);
      if (it == s.clients.end()) continue;
      if (fds[i].revents & POLLIN) {
        // A request while its last reply is unread: it waits (one reply,
        // and so one descriptor, in flight per client).
        if (!(fds[i].revents & (POLLHUP | POLLERR)) && unread_reply_bytes(fds[i].fd) > 0) {
          it->second->stalled = true;
          continue;
        }
        try {
          s.serve(*it->second);
        } catch (const std::exception& e) {  // whatever a client caused ends that client only
          s.comings.line(it->second->uid, "client " + std::to_string(it->second->id) + ": " + e.what());
          s.drop(fds[i].fd, "failed");
        }
      } else {
        s.drop(fds[i].fd, "hung up");
      }
    }
    s.reply_to_tree_batches();
    s.reply_to_mapping_checks();
    s.reply_to_section_builds();
    if (fds[0].revents) s.accept_clients();
  }
  log_line("stopping: outstanding commands complete with an abort status");
  s.ctl->stop();
  std::vector<int> clients;
  for (auto& [fd, c] : s.clients) clients.push_back(fd);
  for (int fd : clients) s.drop(fd, "closed by the server (stopping)");
  s.workers.reset();  // the batches they have run (no one to answer now)
  s.checkers.reset();
  s.builders.reset();
  close(s.listen_fd);
  s.listen_fd = -1;
  unlink(s.cfg.socket_path.c_str());
  log_line("stopped");
}

const server_config& server::config() const { return impl_->cfg; }
controller& server::ctl() { return *impl_->ctl; }
uint32_t server::client_count() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return uint32_t(impl_->clients.size());
}
std::string server::stats_json() const { return impl_->stats_json(); }
std::string server::prometheus() const { return impl_->prometheus(); }

void log_line(const std::string& line) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::fprintf(stderr, "%s deepwell serve: %s\n", ts, line.c_str());
}

}  // namespace deepwell::server
