// A client's link to `deepwell serve`: requests and replies on the
// server's socket (wire.hpp), queue pairs as memfds this process maps, and
// a watcher that turns the server's going away into stopped queues.
#include "common/unique_fd.hpp"
#include "deepwell/link/server_link.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "deepwell/common/error.hpp"
#include "deepwell/protocol/shared_atomic.hpp"
#include "protocol/wire.hpp"

namespace deepwell {

std::string server_from_env() {
  const char* s = std::getenv("DEEPWELL_SERVER");
  return s ? std::string(s) : std::string();
}

namespace {

class socket_link final : public server_link, public std::enable_shared_from_this<socket_link> {
 public:
  socket_link(std::string path, int sock) : path_(std::move(path)), sock_(sock) {
    if (pipe2(wake_, O_CLOEXEC) != 0) {
      close(sock_);
      throw error(errno_message("pipe for the server link's watcher", errno));
    }
  }

  ~socket_link() override {
    stopping_.store(true);
    if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
    if (watcher_.joinable()) watcher_.join();
    close(sock_);
    close(wake_[0]);
    close(wake_[1]);
  }

  // watch: a link with queue pairs watches for the server going away;
  // a tree session's extra connection (remote_tree) has none to stop.
  void start(const std::string& name, bool watch = true) {
    wire::message m;
    m.h.op = uint16_t(wire::op::hello);
    m.text = name;
    // A socket whose listener never answers (not a deepwell server, or one
    // that hangs) must not hold the caller forever: the greeting has a
    // deadline. Later calls wait as long as the server works on them.
    constexpr int hello_seconds = 30;
    timeval limit{hello_seconds, 0};
    setsockopt(sock_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    wire::message r;
    const auto asked = std::chrono::steady_clock::now();
    try {
      r = call(std::move(m));
    } catch (const error&) {
      if (std::chrono::steady_clock::now() - asked < std::chrono::seconds(hello_seconds)) throw;
      throw error("deepwell server " + path_ + ": no answer to hello within " + std::to_string(hello_seconds) +
                  " s (is a deepwell server listening there?)");
    }
    limit = timeval{0, 0};
    setsockopt(sock_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    client_id_ = r.h.b;
    name_ = name;
    if (watch) watcher_ = std::thread([this] { this->watch(); });
  }
  const std::string& name() const { return name_; }

  std::unique_ptr<queue_pair_handle> open_queue_pair(const qp_geometry& g) override {
    wire::message m;
    m.h.op = uint16_t(wire::op::open_queue_pair);
    m.h.a = g.sq_entries;
    m.h.b = g.cq_entries;
    m.h.c = g.slot_bytes;
    wire::message r = call(std::move(m));
    if (r.fd < 0) throw error("deepwell server " + path_ + ": no memory came with the queue pair");
    const uint32_t qid = r.h.a;
    const int fd = r.fd;
    std::unique_ptr<queue_pair_handle> h;
    try {
      h = std::make_unique<queue_pair_handle>(qid, g, fd, size_t(r.h.x),
                                              [self = shared_from_this(), qid] { self->close_queue_pair(qid); });
    } catch (...) {
      close(fd);
      throw;
    }
    close(fd);  // the handle keeps its own duplicate
    std::lock_guard<std::mutex> lock(queues_mutex_);
    queues_[qid] = h->header();
    if (!connected_.load()) mark_stopped(h->header());  // gone meanwhile
    return h;
  }

  namespace_info info(uint32_t nsid) const override { return dataset_reply(call_on(wire::op::info, nsid)); }

  uint32_t lookup(const std::string& name_or_path) override {
    wire::message m;
    m.h.op = uint16_t(wire::op::lookup);
    // A path is resolved here, by the client: the server compares text
    // and never walks a path a client names (a hung network or FUSE mount
    // would stall it for everyone).
    m.text = name_or_path;
    if (!name_or_path.empty() && name_or_path[0] == '/') {
      char buf[PATH_MAX];
      if (realpath(name_or_path.c_str(), buf)) m.text = buf;
    }
    return dataset_reply(call(std::move(m))).nsid;
  }

  bool may_write(uint32_t nsid) const override {
    const wire::message r = call_on(wire::op::info, nsid);
    return (r.h.d & wire::right_write) && !r.h.c;
  }

  uint32_t open_dataset(const dataset_request& r) override {
    const uint32_t nsid = lookup(r.name);
    if (r.writable && !may_write(nsid))
      throw error("deepwell server " + path_ + ": dataset '" + r.name +
                  "' is not writable by this client (read-only, or granted for reading only)");
    return nsid;
  }

  uint32_t open_section(const section_request& q) override {
    wire::message m;
    m.h.op = uint16_t(wire::op::open_section);
    m.h.a = q.dataset;
    m.h.b = q.block_size;
    m.h.c = (q.writable ? 1u : 0u) | uint32_t(q.sums) << 8;
    m.h.d = q.sum_block;
    m.h.x = q.offset;
    m.h.y = q.bytes;
    m.text.resize(16);
    std::memcpy(m.text.data(), &q.sums_offset, 8);
    std::memcpy(m.text.data() + 8, &q.sums_bytes, 8);
    return dataset_reply(call(std::move(m))).nsid;
  }

  section_checks checks(uint32_t nsid) const override {
    const wire::message r = call_on(wire::op::section_checks, nsid);
    return section_checks{r.h.x, r.h.y};
  }

  void set_verify(uint32_t nsid, bool on) override { call_on(wire::op::set_verify, nsid, on ? 1 : 0); }

  std::shared_ptr<tree_session> open_tree(const tree_request& q) override;

  // A request of a session this link made (remote_tree).
  wire::message request(wire::message m) const { return call(std::move(m)); }

  std::shared_ptr<const host_mapping> map_dataset(uint32_t nsid, bool files) const override {
    wire::message r = call_on(wire::op::map_dataset, nsid, files ? 1 : 0);
    const auto kind = wire::map_kind(r.h.a);
    if (kind == wire::map_kind::none || r.fd < 0) {
      if (r.fd >= 0) close(r.fd);
      return nullptr;
    }
    try {
      // A file: its own range of it (a section's is not at byte 0).
      std::shared_ptr<const host_mapping> mp =
          kind == wire::map_kind::file ? map_file_readonly(r.fd, r.h.y, r.h.x) : map_fd(r.fd, kind, r.h.b != 0, r.h.x);
      close(r.fd);
      if (!mp) throw error("deepwell server " + path_ + ": mapping the file it shared failed");
      return mp;
    } catch (...) {
      close(r.fd);
      throw;
    }
  }

  std::shared_ptr<const host_mapping> map_tier(uint32_t nsid) const override {
    wire::message r = call_on(wire::op::map_tier, nsid);
    if (r.fd < 0) return nullptr;
    try {
      auto mp = map_fd(r.fd, wire::map_kind::memory, false, r.h.x);
      close(r.fd);
      return mp;
    } catch (...) {
      close(r.fd);
      throw;
    }
  }

  std::string dump() const override { return text_call(wire::op::dump); }
  std::string stats() const override { return text_call(wire::op::stats); }
  std::string list() const override { return text_call(wire::op::list); }
  uint32_t client_id() const override { return client_id_; }
  const std::string& socket_path() const override { return path_; }
  bool connected() const override { return connected_.load(); }

 private:
  std::string path_;
  int sock_;
  int wake_[2] = {-1, -1};
  uint32_t client_id_ = 0;
  std::string name_;
  mutable std::mutex call_mutex_;  // one request at a time
  mutable uint32_t seq_ = 0;
  std::atomic<bool> connected_{true};
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
  std::mutex queues_mutex_;
  std::map<uint32_t, qp_header*> queues_;  // live queue pairs' headers (our mappings)

  wire::message call(wire::message m) const {
    std::lock_guard<std::mutex> lock(call_mutex_);
    if (!connected_.load()) throw error("deepwell server " + path_ + " is gone (stopped or restarted): connect again");
    m.h.seq = ++seq_;
    const uint16_t op = m.h.op;
    wire::message r;
    if (!wire::send_message(sock_, std::move(m)) || !wire::receive_message(sock_, r))
      throw error("deepwell server " + path_ + " closed the connection during " + wire::op_name(op));
    if (r.h.seq != seq_ || r.h.op != op) {
      if (r.fd >= 0) close(r.fd);
      throw error("deepwell server " + path_ + ": a reply out of order (protocol error)");
    }
    if (r.h.status != 0) {
      if (r.fd >= 0) close(r.fd);
      throw error("deepwell server " + path_ + ": " + r.text);
    }
    return r;
  }

  // A request about one dataset or queue pair (h.a), with an argument (h.b).
  wire::message call_on(wire::op o, uint32_t id, uint32_t arg = 0) const {
    wire::message m;
    m.h.op = uint16_t(o);
    m.h.a = id;
    m.h.b = arg;
    return call(std::move(m));
  }

  // A text reply, read from its memfd where it is longer than a message.
  std::string text_call(wire::op o) const {
    wire::message m;
    m.h.op = uint16_t(o);
    wire::message r = call(std::move(m));
    if (r.fd < 0) return std::move(r.text);
    const detail::unique_fd fd(r.fd);
    const std::string what = "deepwell server " + path_ + ": a long " + wire::op_name(uint16_t(o)) + " reply";
    if (r.h.c != wire::long_text || r.h.x > wire::long_text_max) throw error(what + " with an unexpected descriptor");
    std::string text(r.h.x, '\0');
    for (size_t got = 0; got < text.size();) {
      const ssize_t n = pread(fd.get(), text.data() + got, text.size() - got, off_t(got));
      if (n <= 0) throw error(what + " could not be read");
      got += size_t(n);
    }
    return text;
  }

  static namespace_info dataset_reply(const wire::message& r) {
    namespace_info i;
    i.nsid = r.h.a;
    i.block_size = r.h.b;
    i.read_only = r.h.c != 0 || !(r.h.d & wire::right_write);  // as this client may use it
    i.bytes = r.h.x;
    i.blocks = r.h.y;
    // The description, then (after a newline) the server's route.
    const size_t nl = r.text.find('\n');
    i.description = r.text.substr(0, nl);
    i.route = nl == std::string::npos ? "deepwell serve" : r.text.substr(nl + 1);
    return i;
  }

  static std::shared_ptr<const host_mapping> map_fd(int fd, wire::map_kind kind, bool writable, uint64_t bytes) {
    const int prot = PROT_READ | (writable && kind == wire::map_kind::memory ? PROT_WRITE : 0);
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t len = (bytes + page - 1) / page * page;
    void* p = mmap(nullptr, len, prot, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw error(errno_message("mapping a dataset the deepwell server shared", errno));
    auto m = std::make_shared<host_mapping>();
    m->data = static_cast<const uint8_t*>(p);
    m->bytes = bytes;
    m->base = p;
    m->base_bytes = len;
    m->file = kind == wire::map_kind::file;
    m->writable = prot & PROT_WRITE;
    m->resident = kind == wire::map_kind::memory ? 1.0 : resident_share(p, len);
    // Not owned by anyone else: host_mapping's destructor unmaps it.
    return m;
  }

  void close_queue_pair(uint32_t qid) {
    {
      std::lock_guard<std::mutex> lock(queues_mutex_);
      queues_.erase(qid);
    }
    if (!connected_.load()) return;
    try {
      call_on(wire::op::close_queue_pair, qid);
    } catch (const error&) {
      // The server is gone: it drops the queue pair with our connection.
    }
  }

  static void mark_stopped(qp_header* h) { shared_store_release(&h->state, uint32_t(queue_state::stopped)); }

  // Waits for the server's end of the socket to close (it stopped,
  // crashed or restarted); then nobody will serve our queues: say so in
  // their state, where waiting clients look.
  void watch() {
    pollfd p[2] = {{sock_, POLLRDHUP, 0}, {wake_[0], POLLIN, 0}};
    while (!stopping_.load()) {
      const int n = poll(p, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (stopping_.load()) return;
      if (n < 0 || (p[0].revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))) break;
    }
    connected_.store(false);
    std::lock_guard<std::mutex> lock(queues_mutex_);
    for (auto& [qid, h] : queues_) mark_stopped(h);
  }
};

int connect_socket(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty()) throw error("no deepwell server socket given (set DEEPWELL_SERVER or pass a path)");
  if (path.size() >= sizeof(addr.sun_path))
    throw error("deepwell server socket path " + path + " is longer than " + std::to_string(sizeof(addr.sun_path) - 1) +
                " bytes");
  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) throw error(errno_message("socket for the deepwell server", errno));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    close(s);
    throw error(errno_message("no deepwell server at " + path + " (is `deepwell serve` running?)", e));
  }
  return s;
}

// A tree session the server holds for this client: each batch one message
// (split where its paths would not fit in one). The file API's service
// threads send batches at once; each takes a connection of its own (a
// lane: one made as it is first needed, joined to the session with its
// key), as one connection carries one request at a time. Where the server
// refuses another connection (its per-uid limit), a thread shares the
// session's own.
class remote_tree final : public tree_session {
 public:
  remote_tree(std::shared_ptr<socket_link> link, const wire::message& r)
      : link_(std::move(link)), nsid_(r.h.a), first_(r.h.b), windows_(r.h.c), writable_(r.h.d != 0), what_(r.text),
        key_{r.h.x, r.h.y}, idle_{link_} {}
  ~remote_tree() override {
    {
      std::lock_guard<std::mutex> lock(lanes_mutex_);
      idle_.clear();  // each closes: the server lets it leave the session
    }
    if (!link_->connected()) return;
    wire::message m;
    m.h.op = uint16_t(wire::op::close_tree);
    m.h.a = nsid_;
    try {
      link_->request(std::move(m));
    } catch (const error&) {  // gone: the server ends the session with the connection
    }
  }
  uint32_t nsid() const override { return nsid_; }
  uint32_t first_window() const override { return first_; }
  uint32_t windows() const override { return windows_; }
  bool writable() const override { return writable_; }
  std::string describe() const override { return what_; }

  void run(tree_call* calls, uint32_t n) override {
    for (uint32_t i = 0; i < n;) {
      // As many as fit in a message, the reply's names included.
      uint32_t k = 0;
      size_t bytes = 0;
      while (i + k < n && k < tree_batch_max) {
        const size_t more = sizeof(tree_op) + std::max(calls[i + k].path.size(), name_room);
        if (k && bytes + more > wire::max_text) break;
        bytes += more;
        ++k;
      }
      wire::message m;
      m.h.op = uint16_t(wire::op::tree_ops);
      m.h.a = nsid_;
      m.h.b = k;
      m.text = wire::pack_tree_request(calls + i, k);
      std::shared_ptr<socket_link> lane = take_lane();
      const wire::message r = (lane ? *lane : *link_).request(std::move(m));
      if (lane) give_back(std::move(lane));
      if (!wire::unpack_tree_reply(r.text, k, calls + i))
        throw error("deepwell server " + link_->socket_path() + ": a malformed reply to tree ops (protocol error)");
      i += k;
    }
  }

 private:
  static constexpr size_t name_room = 256;  // a reply's readdir name, at most
  // Lanes at most: the file API's service threads, with room to spare.
  static constexpr uint32_t lanes_max = 8;

  // An idle lane (the session's own connection is the first), a new one,
  // or none: then the session's own connection, shared.
  std::shared_ptr<socket_link> take_lane() {
    {
      std::lock_guard<std::mutex> lock(lanes_mutex_);
      if (!idle_.empty()) {
        auto l = std::move(idle_.back());
        idle_.pop_back();
        return l;
      }
      if (lanes_ >= lanes_max || refused_) return nullptr;
      ++lanes_;
    }
    try {
      auto l = std::make_shared<socket_link>(link_->socket_path(), connect_socket(link_->socket_path()));
      l->start(link_->name() + " (tree lane)", /*watch=*/false);
      wire::message m;
      m.h.op = uint16_t(wire::op::join_tree);
      m.h.a = nsid_;
      m.h.x = key_[0];
      m.h.y = key_[1];
      l->request(std::move(m));
      return l;
    } catch (const error&) {
      // Refused (the uid's connections at their limit): no more tries.
      std::lock_guard<std::mutex> lock(lanes_mutex_);
      --lanes_;
      refused_ = true;
      return nullptr;
    }
  }
  void give_back(std::shared_ptr<socket_link> l) {
    std::lock_guard<std::mutex> lock(lanes_mutex_);
    idle_.push_back(std::move(l));
  }

  std::shared_ptr<socket_link> link_;
  uint32_t nsid_, first_, windows_;
  bool writable_;
  std::string what_;
  uint64_t key_[2];
  std::mutex lanes_mutex_;
  std::vector<std::shared_ptr<socket_link>> idle_;
  uint32_t lanes_ = 0;  // made (besides the session's own)
  bool refused_ = false;
};

std::shared_ptr<tree_session> socket_link::open_tree(const tree_request& q) {
  if (q.name.empty()) throw error("open_tree: no tree named");
  wire::message m;
  m.h.op = uint16_t(wire::op::open_tree);
  m.h.b = q.writable ? 1 : 0;
  m.h.c = q.max_open;
  m.h.d = q.max_dirs;
  m.text = q.name;
  const wire::message r = call(std::move(m));
  return std::make_shared<remote_tree>(shared_from_this(), r);
}

}  // namespace

std::shared_ptr<server_link> server_link::connect(const std::string& path, const std::string& name) {
  auto link = std::make_shared<socket_link>(path, connect_socket(path));
  link->start(name.empty() ? "pid " + std::to_string(getpid()) : name);
  return link;
}

}  // namespace deepwell
