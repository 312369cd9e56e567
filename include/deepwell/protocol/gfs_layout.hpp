// The file API's shared structures (docs/files.md): what kernels hold (a
// gfile, a gdir), the open-file table in client memory, and the request
// slots through which kernels ask the host's file service to open, close,
// list and truncate files.
//
// Every open file is a window of 2^gfs_window_shift bytes in one namespace
// of the controller (the file service's window target), so its pages live
// in the same HBM cache as arrays, keyed by (window, page) like any
// dataset's. Windows are never reused while the file system lives, so a
// page cached for one file can never be mistaken for another's.
#pragma once
#include <cstdint>

#include "deepwell/common/config.hpp"

namespace deepwell {

constexpr uint32_t gfs_window_shift = 40;      // bytes per window: a file may grow to 1 TiB
constexpr uint32_t gfs_path_max = 4096;        // PATH_MAX, the terminating NUL included
constexpr uint32_t gfs_name_max = 256;         // a directory entry's name, NUL included
// An open-file entry's tag: its window (the low gfs_tag_window_bits; a file
// system has at most 2^20 windows) and the entry's generation (the high
// bits, raised each time the entry is handed out), so a handle, or a late
// clear, of an entry's earlier file never matches its later one.
constexpr uint32_t gfs_tag_window_bits = 20;
DW_HD constexpr uint32_t gfs_tag_window(uint32_t tag) { return tag & ((1u << gfs_tag_window_bits) - 1); }

// gopen flags: Linux's O_* values, so host code may pass those.
constexpr uint32_t g_rdonly = 00;
constexpr uint32_t g_wronly = 01;
constexpr uint32_t g_rdwr = 02;
constexpr uint32_t g_creat = 0100;
constexpr uint32_t g_trunc = 01000;
constexpr uint32_t g_accmode = 03;
// GPUfs's O_GWRONCE: a new output file, each byte written at most once (by
// any warp, in disjoint ranges), never read. Comes with g_wronly; the file
// is created or emptied at open, and nobody else may have it open (EBUSY).
// A page not in the cache is never read first: it starts as zeros, and the
// host merges its written-back bytes into the file (a byte-wise OR, so a
// page written back, evicted and written again keeps both parts). Not a
// Linux O_* bit.
constexpr uint32_t g_gwronce = 1u << 30;

// A file opened by gopen: the same in every lane of the warp that opened
// it; pass it by value. err is 0 or an errno (ENOENT, EACCES, EISDIR,
// EMFILE, ENAMETOOLONG, ETIMEDOUT, ...).
struct gfile {
  int32_t fd = -1;        // index in the open-file table
  uint32_t window = 0;    // which window of the namespace holds its bytes
  uint32_t tag = 0;       // what its entry publishes while open (gfs_tag_window)
  uint32_t flags = 0;     // g_* as opened
  int32_t err = 9;        // EBADF until opened
  uint32_t mode = 0;      // st_mode at open
  int64_t mtime_ns = 0;   // st_mtim at open
  DW_HD bool ok() const { return err == 0; }
  DW_HD bool writable() const { return (flags & g_accmode) != g_rdonly; }
  DW_HD bool readable() const { return (flags & g_accmode) != g_wronly; }
  DW_HD bool write_once() const { return (flags & g_gwronce) != 0; }
};

struct gstat {
  uint64_t size = 0;      // the file's size as the GPU sees it (its own writes included)
  uint32_t mode = 0;
  int64_t mtime_ns = 0;
};

// A directory opened by gopendir; greaddir fills a gdirent.
struct gdir {
  int32_t id = -1;
  int32_t err = 9;
  DW_HD bool ok() const { return err == 0; }
};
struct gdirent {
  uint8_t type = 0;              // DT_REG (8), DT_DIR (4), DT_LNK (10), ... as readdir(3)
  char name[gfs_name_max] = {};
};

// One open file's state on the clients' side (client memory). The host
// hands out `fd`; the first warp to open the file fills the entry and
// publishes `tag` last, later openers wait to see it. The last close clears
// it (the closing warp, and the host before the entry is handed out again).
struct alignas(32) gfs_open_entry {
  unsigned long long size;  // logical size: raised by gwrite (atomic max), set by gftruncate
  uint32_t tag;             // published last (release); 0: no file
  uint32_t written;         // some gwrite or writable mapping since open
  uint32_t flags;
  uint32_t pad[3];
};

// Operations of a request.
enum class gfs_op : uint32_t { open = 1, close, truncate, sync_size, opendir, readdir, closedir };

// One request slot in host memory shared with the service. Single-writer
// fields: the client writes the request and then `ticket` (release); the
// service writes the reply and then `done` = ticket (release). A client
// owns a slot through a lock word in client memory (CPU-GPU atomics on
// host memory are not used, as elsewhere in deepwell).
struct alignas(64) gfs_slot {
  uint32_t ticket;
  uint32_t done;
  uint32_t op;
  uint32_t flags;
  uint64_t a0, a1, a2;      // arguments (fd, window, size, ...)
  int32_t err;              // reply: 0 or an errno
  uint32_t len;             // bytes of text (path in, name out)
  uint64_t r0, r1, r2, r3;  // reply values
  char text[gfs_path_max];
};

}  // namespace deepwell
