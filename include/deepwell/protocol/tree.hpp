// A tree: a directory whose files the file API (files/file_system.hpp)
// opens beneath its root, each read and written through a window of one
// namespace. A client asks its link for one (controller_link::open_tree):
// in process the link opens the directory itself; under `deepwell serve`
// the server does, for a tree dataset of its config, and resolves every
// path, opens every file and checks every request there, as the client's
// grant on the tree allows.
//
// The session's work comes in batches of tree_ops (one system call or one
// message a batch, not one a file). A tree_op is plain bytes, the same in
// process and on the wire: every field is checked by the side that holds
// the files, never trusted.
#pragma once
#include <cstdint>
#include <string>

namespace deepwell {

struct tree_request {
  // In process: the directory's path. Under a server: a tree dataset's name.
  std::string name;
  bool writable = false;    // refused (EROFS at each open for writing) unless granted
  uint32_t max_open = 4096;  // files open at once through the session (a server may lower it)
  uint32_t max_dirs = 1024;  // directories open at once
};

enum class tree_op_kind : uint32_t {
  open = 1,         // path; flags: tree_open_*; window: attach the file to it (0: none) -> id: the file, st,
                    //   value: 1 if read with O_DIRECT
  stat = 2,         // file -> st
  truncate = 3,     // file, size: ftruncate (the file counts as written, for the next flush)
  set_size = 4,     // file, size; flags 1: durably -> the file's size becomes size if it differs
  write_error = 5,  // file -> value: the first failed write-back's errno, 0 if none
  close = 6,        // file: the id is done with (a window it is attached to keeps the file open)
  attach = 7,       // window, file: the window reads and writes that file from now on
  detach = 8,       // window; file: only while that file is the one attached (0: whichever)
  writes_done = 9,  // window -> value: its write-backs completed or failed so far, modulo 2^32
  opendir = 10,     // path -> id: the directory
  readdir = 11,     // file: the directory -> value: the entry's d_type; the name (none at the end)
  closedir = 12,    // file: the directory
};

// open's flags.
constexpr uint32_t tree_open_write = 1;       // read and write (else read-only)
constexpr uint32_t tree_open_create = 2;      // O_CREAT (mode 0644)
constexpr uint32_t tree_open_direct = 4;      // O_DIRECT where the file system has it (a read-only open)
constexpr uint32_t tree_open_write_once = 8;  // write-once output (files/gfs_layout.hpp, g_gwronce)
constexpr uint32_t tree_open_flags = 15;

struct tree_stat {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  uint32_t mode = 0;
  uint32_t pad = 0;
};

struct tree_op {
  uint32_t kind = 0;        // tree_op_kind
  uint32_t flags = 0;
  uint32_t window = 0;
  uint32_t path_bytes = 0;  // open, opendir: bytes of the path (no NUL), which follow the ops on the wire
  uint64_t file = 0;        // a file's or a directory's id, as open and opendir gave it
  uint64_t size = 0;
  // Results.
  int32_t err = 0;          // 0 or an errno
  uint32_t value = 0;
  uint64_t id = 0;
  tree_stat st{};
};
static_assert(sizeof(tree_op) == 96, "tree_op is on the wire");

// One op, its path (open, opendir) and its entry name (readdir's result).
struct tree_call {
  tree_op op;
  std::string path;
  std::string name;
};

// Ops a batch may carry, and a path's longest (PATH_MAX less its NUL).
constexpr uint32_t tree_batch_max = 64;
constexpr uint32_t tree_path_max = 4095;

class tree_session {
 public:
  virtual ~tree_session() = default;
  // The namespace whose windows (2^gfs_window_shift bytes each) the
  // session's files are read and written through, and the windows it may
  // use: [first_window, first_window + windows).
  virtual uint32_t nsid() const = 0;
  virtual uint32_t first_window() const = 0;
  virtual uint32_t windows() const = 0;
  virtual bool writable() const = 0;  // opens for writing are allowed
  virtual std::string describe() const = 0;
  // Runs calls[0..n) in order (at most tree_batch_max), each answered in
  // its op's err and results. Throws deepwell::error only when the session
  // itself fails (the server went away).
  virtual void run(tree_call* calls, uint32_t n) = 0;
  // An open file's descriptor in this process, for a mapping of it (the
  // direct tier), valid while its id is; -1 where the files are another
  // process's (a server's).
  virtual int descriptor(uint64_t /*file*/) const { return -1; }

  // One call.
  tree_op run_one(tree_call c) {
    run(&c, 1);
    return c.op;
  }
};

}  // namespace deepwell
