// file_system: the host side of the file API (docs/files.md). It owns
//  - a session on a tree (tree.hpp), which it asks the cache's link for: a
//    namespace in which every open file is a window of 2^40 bytes (reads
//    past a file's end give zeros, writes go to the file, a Flush fsyncs
//    the files written since the last), and the files themselves, which the
//    tree's side resolves beneath the root (openat2 RESOLVE_BENEATH: "..",
//    absolute paths and symlinks that leave the root are refused with
//    EACCES) and opens: in this process as its user (so permissions are
//    the kernel's), or in `deepwell serve` as the client's grant on the
//    tree dataset allows (writes to a read-only grant: EROFS);
//  - the open-file table and the request slots kernels use (client memory
//    and host memory, from a client_memory of the cache's kind);
//  - service threads that answer the slots, and close files when their
//    last GPU user does.
//
//   auto cache = deepwell::make_gpu_page_cache(deepwell::embedded_link(), {});
//   auto fs = deepwell::make_gpu_file_system(cache, {.root = "/data/tree"});
//   my_kernel<<<blocks, threads>>>(fs->ref());
//
// Under a server, the same with a cache on deepwell::connect(SOCKET) and
// root the tree dataset's name.
//
// Consistency is close-to-open: a gopen after the host changed a file (its
// size, mtime or ctime differ from when the GPU last closed it) starts from
// a fresh window; a gclose of a written file writes its pages back and
// sets the file's size, so the host (or another program) that opens it
// afterwards sees the GPU's writes (durable only after gfsync, as POSIX's
// close is not). The closer thread finishes such closes once the window's
// target has completed every write-back the client had submitted:
// gclose's warp waits for that, gclose_async's does not (sync() does).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/files/client_memory.hpp"
#include "deepwell/files/gfs_ref.hpp"

namespace deepwell {

struct file_system_options {
  // Every path is resolved beneath it; required. A directory where the
  // cache's link is in this process; a tree dataset's name under a server.
  std::string root;
  uint32_t max_open = 4096;    // open files at once (more: EMFILE)
  uint32_t max_dirs = 1024;    // open directories at once (more: EMFILE)
  uint32_t slots = 64;         // request slots (requests in flight from kernels at once)
  bool read_only = false;      // refuse every open for writing (EROFS)
  // Files opened read-only are read with O_DIRECT (storage to staging, no
  // page cache: a large cold stream), where the file system allows it
  // (elsewhere, and for files opened for writing, buffered).
  bool direct_io = false;
  // Large files opened read-only whose pages are all in the page cache
  // (the cache's direct_files policy: `always` skips the check) are read
  // through the direct tier: mapped, registered, and copied by the missing
  // warp from host memory with no controller round trip. `automatic`: on
  // for a GPU cache (its registration pins the pages, so a file that
  // shrinks meanwhile leaves the GPU its bytes as at open), off for CPU
  // clients (a mapping read past a shrunken file's end raises SIGBUS).
  enum class direct_tier { automatic, off, on } files_direct = direct_tier::automatic;
  uint64_t direct_min_bytes = 8ull << 20;  // smaller files: registering costs more than it saves
  // Pinned at once by direct tiers (files open, and closed ones until
  // sync()); 0: a quarter of the machine's memory. Beyond it, opens go
  // through the controller.
  uint64_t direct_max_bytes = 0;
  uint64_t timeout_ns = 0;     // a request's deadline; 0: the cache's timeout
  // Host threads answering the slots (each its share of them): opens make
  // their system calls (openat, fstat) in parallel; everything that changes
  // the tables takes one lock. 1 to 64.
  uint32_t service_threads = 4;
  // Diagnostics: the service threads also measure their CPU time, sleeps,
  // preemptions and page faults within the opens' calls (stats()'s
  // open_calls_cpu_ns and the three after it; four system calls a batch).
  bool profile_service = false;
  // GPU clients: a warp waiting for its reply polls host memory, sleeping
  // up to this long between polls (from 64 ns, doubling); 0: 32-200 ns.
  uint32_t reply_poll_ns = 0;
};

struct file_system_stats {
  uint64_t requests = 0;       // answered
  uint64_t opens = 0;          // successful gopen calls (each warp's)
  uint64_t files_opened = 0;   // files the host opened (first users)
  uint64_t direct_opens = 0;   // of those, opened with O_DIRECT (file_system_options::direct_io)
  uint64_t direct_tier_opens = 0;  // of those, read through the direct tier (file_system_options::files_direct;
                                   // one whose tier was made by a later opener counts once it has it)
  uint64_t direct_tier_bytes = 0;  // pinned by direct tiers now (released at sync())
  uint64_t windows_reused = 0; // reopens that kept their cached pages
  uint64_t closes = 0;
  uint64_t background_closes = 0;        // gclose_async closes finished by the host
  uint64_t background_close_errors = 0;  // of those, failed (sync() throws the first)
  uint32_t closes_pending = 0;           // closes of written files whose writes have not all landed
  uint64_t errors = 0;         // requests answered with an errno
  uint64_t service_ns = 0;     // time the service threads spent answering requests (summed)
  uint64_t lock_wait_ns = 0;   // waiting for the tables' lock (mostly within service_ns; also the closer's)
  // Of service_ns, where a batch of requests spends it: the opens' system
  // calls before the lock (openat2, fstat), the lock held (waits excluded),
  // and after it (descriptors closed, tags cleared, the replies).
  uint64_t open_calls_ns = 0, locked_ns = 0, after_lock_ns = 0;
  uint64_t syscalls_ns = 0;  // of open_calls_ns: inside openat2 and fstat themselves
  // With file_system_options::profile_service: the service threads' CPU
  // time in open_calls_ns (less: off a CPU), and their sleeps (voluntary
  // context switches), preemptions and page faults in it.
  uint64_t open_calls_cpu_ns = 0;
  uint64_t open_calls_sleeps = 0, open_calls_preempted = 0, open_calls_faults = 0;
  // With profile_service: of locked_ns, in the opens' table work and in the
  // other requests'; and the time in the window target's attach (under the
  // tables' lock) and detach (after it), whose shard locks the pollers
  // take for their reads.
  uint64_t locked_opens_ns = 0, locked_others_ns = 0, window_target_ns = 0;
  // A request's time in the service, from the pass over the slots that
  // found it to its reply (summed), and those passes: how many, and their
  // time outside answering requests.
  uint64_t seen_to_reply_ns = 0, passes = 0, pass_ns = 0;
  // With profile_service: the clients' side of the round trips (gfs_ref::
  // call_ns): calls, taking a slot, from the request to seeing its reply,
  // reading the reply and freeing the slot (ns, summed); the looks at
  // their queue cells while waiting for a slot, and the calls that found
  // none free (files/slot_queue.hpp).
  uint64_t client_calls = 0, client_slot_ns = 0, client_wait_ns = 0, client_read_ns = 0;
  uint64_t client_slot_polls = 0, client_slot_waits = 0;
  uint32_t open_files = 0;
  uint32_t open_dirs = 0;
};

class file_system {
 public:
  ~file_system();
  file_system(const file_system&) = delete;
  file_system& operator=(const file_system&) = delete;

  const gfs_ref& ref() const { return ref_; }
  const std::string& root() const;
  file_system_stats stats() const;
  // After the kernels that used ref() are done: waits for gclose_async's
  // closes (throwing the first that failed since the last sync), then
  // writes back every written file still open on the GPU, makes it durable
  // and sets its size on disk, and releases the direct tiers of files no
  // longer open (a GPU cannot unregister memory while a kernel runs).
  void sync();

  // Use make_host_file_system / make_gpu_file_system.
  file_system(std::shared_ptr<page_cache> cache, const file_system_options& opts,
              std::unique_ptr<client_memory> memory);

 private:
  struct impl;
  std::unique_ptr<impl> p_;
  gfs_ref ref_{};
};

// CPU clients (a host page cache).
std::shared_ptr<file_system> make_host_file_system(std::shared_ptr<page_cache> cache, const file_system_options& opts);
// GPU clients (a GPU page cache; deepwell_cuda, src/files/gpu_client_memory.cu).
std::shared_ptr<file_system> make_gpu_file_system(std::shared_ptr<page_cache> cache, const file_system_options& opts);

}  // namespace deepwell
