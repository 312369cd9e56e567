// A tree's files, opened in this process (local_tree.hpp).
#include "targets/local_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/fork_join.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/protocol/gfs_layout.hpp"
#include "window_target.hpp"

namespace deepwell::detail {
namespace {

int64_t ns_of(const timespec& t) { return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; }

// Opens `path` beneath `root`: nothing outside it is reachable. openat2
// (Linux 5.6) with RESOLVE_BENEATH refuses "..", absolute paths and
// symlinks that leave the root; where it is missing, a walk component by
// component that refuses ".." and every symlink. Returns an fd or -errno;
// an escape is -EACCES.
int open_beneath(int root, const std::string& path, int flags, mode_t mode) {
  if (!path.empty() && path[0] == '/') return -EACCES;
  const std::string p = path.empty() ? "." : path;
  open_how how{};
  how.flags = uint64_t(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const long fd = syscall(SYS_openat2, root, p.c_str(), &how, sizeof how);
  if (fd >= 0) return int(fd);
  if (errno == EXDEV) return -EACCES;
  if (errno != ENOSYS && errno != EPERM) return -errno;  // EPERM: a seccomp filter that forbids openat2
  // The walk.
  int dir = ::dup(root);
  if (dir < 0) return -errno;
  size_t at = 0;
  for (;;) {
    const size_t slash = p.find('/', at);
    const std::string part = p.substr(at, slash == std::string::npos ? std::string::npos : slash - at);
    if (part == "..") {
      ::close(dir);
      return -EACCES;
    }
    if (slash == std::string::npos) {
      const int f = ::openat(dir, part.c_str(), flags | O_CLOEXEC | O_NOFOLLOW, mode);
      const int e = errno;
      ::close(dir);
      if (f >= 0) return f;
      return e == ELOOP ? -EACCES : -e;
    }
    if (!part.empty() && part != ".") {
      const int next = ::openat(dir, part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      const int e = errno;
      ::close(dir);
      if (next < 0) return e == ELOOP ? -EACCES : -e;
      dir = next;
    }
    at = slash + 1;
  }
}

void fill(tree_stat& t, const struct stat& sb) {
  t.dev = uint64_t(sb.st_dev);
  t.ino = uint64_t(sb.st_ino);
  t.size = uint64_t(sb.st_size);
  t.mtime_ns = ns_of(sb.st_mtim);
  t.ctime_ns = ns_of(sb.st_ctim);
  t.mode = uint32_t(sb.st_mode);
}

// Ids: a table index + 1 in the low half, the entry's generation in the
// high half, so that an id closed and reused names nothing.
template <typename T>
struct id_table {
  struct entry {
    T value{};
    uint32_t gen = 0;
    bool used = false;
  };
  std::vector<entry> entries;
  std::vector<uint32_t> free;
  uint32_t limit = 0;

  explicit id_table(uint32_t max) : limit(max) {}
  // 0 when full.
  uint64_t add(T v) {
    uint32_t i;
    if (!free.empty()) {
      i = free.back();
      free.pop_back();
    } else if (entries.size() < limit) {
      i = uint32_t(entries.size());
      entries.emplace_back();
    } else {
      return 0;
    }
    entry& e = entries[i];
    e.value = std::move(v);
    e.gen = e.gen % 0xFFFFFFFEu + 1;
    e.used = true;
    return uint64_t(e.gen) << 32 | (i + 1);
  }
  const T* find(uint64_t id) const {
    const uint64_t i = (id & 0xFFFFFFFFu) - 1;
    if (i >= entries.size() || !entries[i].used || entries[i].gen != uint32_t(id >> 32)) return nullptr;
    return &entries[i].value;
  }
  T* find(uint64_t id) { return const_cast<T*>(std::as_const(*this).find(id)); }
  T take(uint64_t id) {  // find(id) must be non-null
    entry& e = entries[(id & 0xFFFFFFFFu) - 1];
    e.used = false;
    free.push_back(uint32_t((id & 0xFFFFFFFFu) - 1));
    return std::exchange(e.value, T{});
  }
};

// Drops files' last references (a close(2) each) on a thread of its own,
// off the server's loop thread: closing a file on a FUSE or network mount
// may wait.
class file_releaser {
 public:
  ~file_releaser() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void release(std::shared_ptr<window_file> f) {
    bool first;
    {
      std::lock_guard<std::mutex> l(m_);
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
      first = releasing_.empty();
      releasing_.push_back(std::move(f));
    }
    if (first) cv_.notify_one();  // a waker a burst, not one a file
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(m_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !releasing_.empty(); });
      std::vector<std::shared_ptr<window_file>> now;
      now.swap(releasing_);
      l.unlock();
      now.clear();
      l.lock();
      if (stop_ && releasing_.empty()) return;
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<window_file>> releasing_;
  bool stop_ = false;
  std::thread thread_;
};

// Shared by every server session: a batch's opens spread over a few
// threads (when another session's batch has them, a batch runs on its own
// thread: the server is then running batches in parallel already).
fork_join& shared_open_pool() {
  static fork_join pool(fork_join::default_helpers());
  return pool;
}

file_releaser& shared_releaser() {
  static file_releaser r;
  return r;
}

class local_tree final : public tree_session {
 public:
  local_tree(const tree_request& r, std::shared_ptr<target> windows, uint32_t nsid, uint32_t first, bool for_server,
             std::shared_ptr<descriptor_quota> quota, int root, std::shared_ptr<const fs_identity> as)
      : req_(r), windows_(std::move(windows)), target_(dynamic_cast<window_target&>(*windows_)), nsid_(nsid),
        first_(first), server_(for_server), quota_(std::move(quota)), as_(std::move(as)), files_(r.max_open),
        dirs_(r.max_dirs) {
    if (first < tree_first_window || first >= target_.windows())
      throw error("tree: first window " + std::to_string(first) + " is outside the namespace");
    if (r.name.empty()) throw error("tree: no directory named");
    // One descriptor of the root per thread that opens (a few): openat2
    // relative to one descriptor shared by threads bumps that file's
    // reference count on every call, one cache line for them all.
    for (uint32_t k = 0; k < root_copies; ++k) {
      // A copy of a root opened before ("."): its own file, the same directory.
      const int fd = root >= 0 ? ::openat(root, ".", O_PATH | O_DIRECTORY | O_CLOEXEC)
                               : ::open(r.name.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) {
        const int e = errno;
        for (int f : roots_) ::close(f);
        throw error("tree: root " + r.name + " cannot be opened as a directory: " + std::strerror(e));
      }
      roots_.push_back(fd);
    }
  }

  // Its files close as their windows let them go: the caller detaches the
  // windows it attached (the file API at its end), or resets the namespace
  // (the server, at the session's end).
  ~local_tree() override {
    for (auto& e : dirs_.entries)
      if (e.used && e.value) close_dir(e.value);
    for (int fd : roots_) ::close(fd);
  }

  uint32_t nsid() const override { return nsid_; }
  uint32_t first_window() const override { return first_; }
  uint32_t windows() const override { return target_.windows() - first_; }
  bool writable() const override { return req_.writable; }
  std::string describe() const override { return "the tree " + req_.name; }

  int descriptor(uint64_t file) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::shared_ptr<window_file>* f = files_.find(file);
    return f ? (*f)->fd : -1;
  }

  void run(tree_call* calls, uint32_t n) override {
    auto answer = [&](uint32_t i) {
      tree_op& op = calls[i].op;
      op.err = 0;
      op.value = 0;
      op.id = 0;
      op.st = {};
      calls[i].name.clear();
      const acting_as who(as_.get());  // on whichever thread runs it
      op.err = who.ok() ? one(calls[i]) : EACCES;
    };
    // In order, but a run of opens (they do not depend on one another) in
    // parallel in a server's session.
    for (uint32_t i = 0; i < n;) {
      uint32_t e = i;
      while (e < n && calls[e].op.kind == uint32_t(tree_op_kind::open)) ++e;
      if (server_ && e - i >= 4) {
        shared_open_pool().run(e - i, [&](uint32_t k) { answer(i + k); });
        i = e;
      } else {
        answer(i++);
      }
    }
  }

 private:
  static constexpr uint32_t root_copies = 8;

  int root() const {
    static thread_local const size_t me = std::hash<std::thread::id>{}(std::this_thread::get_id());
    return roots_[me % roots_.size()];
  }

  int one(tree_call& c) {
    tree_op& op = c.op;
    switch (tree_op_kind(op.kind)) {
      case tree_op_kind::open: return open(c);
      case tree_op_kind::stat: return with_file(op.file, [&](window_file& f) {
          struct stat sb {};
          if (::fstat(f.fd, &sb) != 0) return errno;
          fill(op.st, sb);
          return 0;
        });
      case tree_op_kind::truncate: return with_file(op.file, [&](window_file& f) {
          if (!f.writable) return EBADF;
          if (op.size > (1ull << gfs_window_shift)) return EFBIG;
          if (::ftruncate(f.fd, off_t(op.size)) != 0) return errno;
          f.written.store(true);  // the next flush makes the new size durable
          return 0;
        });
      case tree_op_kind::set_size: return with_file(op.file, [&](window_file& f) {
          if (!f.writable) return 0;  // nothing to set: its size is the file's
          if (op.size > (1ull << gfs_window_shift)) return EFBIG;
          struct stat sb {};
          if (::fstat(f.fd, &sb) != 0) return errno;
          if (uint64_t(sb.st_size) == op.size) return 0;
          if (::ftruncate(f.fd, off_t(op.size)) != 0 || ((op.flags & 1) && ::fsync(f.fd) != 0)) return errno;
          return 0;
        });
      case tree_op_kind::write_error: return with_file(op.file, [&](window_file& f) {
          op.value = uint32_t(f.write_error.load());
          return 0;
        });
      case tree_op_kind::close: {
        std::shared_ptr<window_file> gone;  // its descriptor closed outside the lock
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (!files_.find(op.file)) return EBADF;
          gone = files_.take(op.file);
        }
        // A server's: the descriptor's close(2) off its loop thread.
        if (server_) shared_releaser().release(std::move(gone));
        return 0;
      }
      case tree_op_kind::attach: {
        if (!window_ok(op.window)) return EINVAL;
        std::shared_ptr<window_file> f;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          std::shared_ptr<window_file>* p = files_.find(op.file);
          if (!p) return EBADF;
          f = *p;
        }
        return attach_to(op.window, std::move(f));
      }
      case tree_op_kind::detach: {
        if (!window_ok(op.window)) return EINVAL;
        std::shared_ptr<window_file> f;
        if (op.file) {
          std::lock_guard<std::mutex> lock(mutex_);
          std::shared_ptr<window_file>* p = files_.find(op.file);
          if (!p) return EBADF;
          f = *p;
        }
        if (target_.detach(op.window, f.get()) && server_) attached_.fetch_sub(1);
        return 0;
      }
      case tree_op_kind::writes_done:
        if (!window_ok(op.window)) return EINVAL;
        op.value = target_.writes_done(op.window);
        return 0;
      case tree_op_kind::opendir: return opendir(c);
      case tree_op_kind::readdir: return readdir(c);
      case tree_op_kind::closedir: {
        std::lock_guard<std::mutex> lock(dirs_mutex_);
        if (!dirs_.find(op.file)) return EBADF;
        close_dir(dirs_.take(op.file));
        return 0;
      }
    }
    return EINVAL;
  }

  // 0, or EMFILE when the session has as many windows attached as it may
  // have files open (each attached window holds a file and a table entry:
  // a client must not grow them without bound).
  int attach_to(uint32_t window, std::shared_ptr<window_file> f) {
    // Counted before (a window newly attached takes one), undone after
    // where it replaced a file: parallel opens never pass the limit.
    if (server_ && attached_.fetch_add(1) >= req_.max_open) {
      attached_.fetch_sub(1);
      return EMFILE;
    }
    const bool fresh = target_.attach(window, std::move(f));
    if (server_ && !fresh) attached_.fetch_sub(1);
    return 0;
  }

  bool window_ok(uint32_t w) const { return w >= first_ && w < target_.windows(); }

  template <typename F>
  int with_file(uint64_t id, F&& f) {
    std::shared_ptr<window_file> file;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::shared_ptr<window_file>* p = files_.find(id);
      if (!p) return EBADF;
      file = *p;
    }
    return f(*file);
  }

  // 0, or why the path is not one.
  static int path_error(const tree_call& c) {
    if (c.path.size() > tree_path_max) return ENAMETOOLONG;
    return c.path.find('\0') == std::string::npos ? 0 : EINVAL;
  }

  int open(tree_call& c) {
    tree_op& op = c.op;
    if (op.flags & ~tree_open_flags) return EINVAL;
    if (op.window && !window_ok(op.window)) return EINVAL;
    if (const int e = path_error(c)) return e;
    const bool write = op.flags & tree_open_write, write_once = op.flags & tree_open_write_once;
    if (write_once && !write) return EINVAL;
    // Creating a file writes the tree too, even for a read-only open.
    if ((write || (op.flags & tree_open_create)) && !req_.writable) return EROFS;
    // O_NONBLOCK: a FIFO must not block the service; it is refused below.
    const int oflags = (write ? O_RDWR : O_RDONLY) | ((op.flags & tree_open_create) || write_once ? O_CREAT : 0) |
                       O_NONBLOCK | O_NOCTTY;
    bool direct = !write && (op.flags & tree_open_direct);
    if (quota_ && !quota_->take()) return EMFILE;  // the uid's or the server's descriptors are taken
    auto fail = [&](int fd, int e) {
      if (fd >= 0) ::close(fd);
      if (quota_) quota_->give();
      return e;
    };
    int fd = open_beneath(root(), c.path, oflags | (direct ? O_DIRECT : 0), 0644);
    if (fd == -EINVAL && direct) {  // a file system without O_DIRECT (tmpfs, some overlays): buffered
      direct = false;
      fd = open_beneath(root(), c.path, oflags, 0644);
    }
    if (fd < 0) return fail(-1, -fd);
    struct stat sb {};
    if (::fstat(fd, &sb) != 0) return fail(fd, errno);
    if (!S_ISREG(sb.st_mode)) return fail(fd, S_ISDIR(sb.st_mode) ? EISDIR : EINVAL);
    auto f = std::make_shared<window_file>();
    f->fd = fd;
    f->quota = quota_;  // given back when the descriptor closes
    f->path = c.path;
    f->writable = write;
    f->direct = direct;
    if (write_once) {
      f->make_write_once();
      f->merge_budget = merge_budget_;
    }
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      id = files_.add(f);
    }
    if (!id) return EMFILE;  // f's descriptor closes with it
    if (op.window) {
      if (const int e = attach_to(op.window, f)) {
        std::lock_guard<std::mutex> lock(mutex_);
        files_.take(id);  // the descriptor closes with f
        return e;
      }
    }
    fill(op.st, sb);
    op.id = id;
    op.value = direct;
    return 0;
  }

  int opendir(tree_call& c) {
    if (const int e = path_error(c)) return e;
    if (quota_ && !quota_->take()) return EMFILE;
    const int fd = open_beneath(root(), c.path, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0) {
      if (quota_) quota_->give();
      return -fd;
    }
    DIR* d = ::fdopendir(fd);
    if (!d) {
      const int e = errno;
      ::close(fd);
      if (quota_) quota_->give();
      return e;
    }
    std::lock_guard<std::mutex> lock(dirs_mutex_);
    const uint64_t id = dirs_.add(d);
    if (!id) {
      close_dir(d);
      return EMFILE;
    }
    c.op.id = id;
    return 0;
  }

  int readdir(tree_call& c) {
    std::lock_guard<std::mutex> lock(dirs_mutex_);
    DIR** p = dirs_.find(c.op.file);
    if (!p) return EBADF;
    DIR* d = *p;
    for (;;) {
      errno = 0;
      const dirent* e = ::readdir(d);
      if (!e) return errno;  // 0 at the end (no name)
      if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
      uint8_t type = e->d_type;
      if (type == DT_UNKNOWN) {
        struct stat sb {};
        if (::fstatat(::dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0)
          type = S_ISREG(sb.st_mode) ? DT_REG : S_ISDIR(sb.st_mode) ? DT_DIR : S_ISLNK(sb.st_mode) ? DT_LNK : DT_UNKNOWN;
      }
      c.name.assign(e->d_name, std::min<size_t>(std::strlen(e->d_name), gfs_name_max - 1));
      c.op.id = 1;
      c.op.value = type;
      return 0;
    }
  }

  // A directory's descriptor closed and given back.
  void close_dir(DIR* d) {
    ::closedir(d);
    if (quota_) quota_->give();
  }

  tree_request req_;
  std::shared_ptr<target> windows_;
  window_target& target_;
  uint32_t nsid_;
  uint32_t first_;
  bool server_;  // make_local_tree's for_server
  std::shared_ptr<descriptor_quota> quota_;  // a server's: its files' and directories' descriptors
  std::shared_ptr<const fs_identity> as_;    // a server's client: whose rights its path operations use
  std::vector<int> roots_;
  mutable std::mutex mutex_;  // files_
  std::atomic<uint64_t> attached_{0};  // a server's session: windows with a file of its attached
  // A server's sessions: the pages its write-once files may have merged
  // (each an offset kept in memory until the file closes), 4 M (16 GiB of
  // 4 KiB pages); none in process.
  std::shared_ptr<std::atomic<int64_t>> merge_budget_ =
      server_ ? std::make_shared<std::atomic<int64_t>>(int64_t(4) << 20) : nullptr;
  id_table<std::shared_ptr<window_file>> files_;
  std::mutex dirs_mutex_;  // dirs_ (and readdir's walk of one)
  id_table<DIR*> dirs_;
};

}  // namespace

std::shared_ptr<target> make_tree_windows(const std::string& root) {
  return std::make_shared<window_target>(1ull << 60, root);
}


void reset_tree_windows(target& windows, const std::string& root) {
  dynamic_cast<window_target&>(windows).reset(root);
}

std::shared_ptr<tree_session> make_local_tree(const tree_request& r, std::shared_ptr<target> windows, uint32_t nsid,
                                              uint32_t first_window, bool for_server,
                                              std::shared_ptr<descriptor_quota> quota, int root,
                                              std::shared_ptr<const fs_identity> as) {
  if (!windows || !dynamic_cast<window_target*>(windows.get())) throw error("tree: no windows' target");
  return std::make_shared<local_tree>(r, std::move(windows), nsid, first_window, for_server, std::move(quota), root,
                                      std::move(as));
}


}  // namespace deepwell::detail
