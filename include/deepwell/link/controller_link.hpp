// The controller as its clients see it: "something that serves queue
// pairs". Clients (queue clients, page caches, the C ABI) hold a
// controller_link and queue_pair_handles, never the controller object, so
// a controller in another process can serve them as one in this process
// does. in_process_link() (embedded.hpp) is the link to a controller in
// this process; server_link.hpp's runs over a Unix socket.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "deepwell/common/host_mapping.hpp"
#include "deepwell/protocol/queue_layout.hpp"
#include "deepwell/protocol/section.hpp"
#include "deepwell/protocol/shared_region.hpp"
#include "deepwell/protocol/tree.hpp"

namespace deepwell {

struct namespace_info {
  uint32_t nsid = 0;
  uint32_t block_size = 0;
  uint64_t blocks = 0;  // ceil(bytes / block_size)
  uint64_t bytes = 0;
  bool read_only = false;
  std::string description;
  // Who serves its commands and how: "the controller in this process
  // (io_uring)", "deepwell serve at /run/dw.sock (threads)".
  std::string route;
};

// A queue pair as its client holds it: the client's own mapping of the
// queue pair's shared memory (a memfd, as another process would receive
// it) and its geometry. Closing it (the destructor) deletes the queue pair
// on the controller once its outstanding commands are done.
class queue_pair_handle {
 public:
  // Maps `bytes` of `memfd` (a duplicate is kept; the caller keeps its own
  // descriptor). on_close runs once, when the handle goes.
  queue_pair_handle(uint32_t id, const qp_geometry& g, int memfd, size_t bytes, std::function<void()> on_close);
  // A queue pair whose memory this process has mapped already (a
  // controller in this process): [base, base + bytes), kept mapped by
  // whatever on_close releases.
  queue_pair_handle(uint32_t id, const qp_geometry& g, void* base, size_t bytes, int memfd,
                    std::function<void()> on_close);
  ~queue_pair_handle();
  queue_pair_handle(const queue_pair_handle&) = delete;
  queue_pair_handle& operator=(const queue_pair_handle&) = delete;

  uint32_t id() const { return id_; }
  const qp_geometry& geometry() const { return geometry_; }
  void* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  int memfd() const { return memfd_; }
  qp_header* header() const { return static_cast<qp_header*>(base_); }
  // What the controller last said of the queue (running, stopped, failed).
  queue_state state() const;

 private:
  uint32_t id_;
  qp_geometry geometry_;
  shared_region region_;  // our own mapping, when we made one
  void* base_ = nullptr;
  size_t bytes_ = 0;
  int memfd_ = -1;
  std::function<void()> on_close_;
  void check() const;
};

// A dataset a user names: a file (a controller in this process opens it
// now), or one of a server's datasets by its name or its file's path (as
// the client's grants allow).
struct dataset_request {
  std::string name;
  bool writable = false;
  // A controller in this process only (a server's config says how it opens
  // its datasets): O_DIRECT, and the namespace's block size.
  bool direct = false;
  uint32_t block_size = 4096;
};

class controller_link {
 public:
  virtual ~controller_link() = default;
  // A new queue pair served by the controller. Entries: powers of two, 2
  // to 65536; slot_bytes: a multiple of 512. Throws deepwell::error.
  virtual std::unique_ptr<queue_pair_handle> open_queue_pair(const qp_geometry& g) = 0;
  // Throws deepwell::error for an unknown namespace.
  virtual namespace_info info(uint32_t nsid) const = 0;
  // The namespace's bytes in this process's memory, for readers that skip
  // the controller (the direct tier): the memory of a host-memory dataset
  // (writable if the dataset is), else, if `files`, a read-only mapping of
  // its file (with its residency). nullptr where there is neither.
  virtual std::shared_ptr<const host_mapping> map_dataset(uint32_t nsid, bool files) const = 0;
  // The namespace's arena of the server's host-memory tier (tier_layout.hpp),
  // mapped read-only, for readers that copy resident pages from it; nullptr
  // where the namespace has none.
  virtual std::shared_ptr<const host_mapping> map_tier(uint32_t nsid) const = 0;
  // The namespace of a dataset (dataset_request). Throws deepwell::error
  // naming it when there is none this client may use as asked (missing,
  // not granted, or read-only when `writable`).
  virtual uint32_t open_dataset(const dataset_request& r) = 0;
  // A section of a dataset of this link as a namespace of its own
  // (section.hpp). Throws deepwell::error naming what is wrong with the
  // request, or the limit it meets.
  virtual uint32_t open_section(const section_request& r) = 0;
  // What a checked section's reads met so far.
  virtual section_checks checks(uint32_t nsid) const = 0;
  // Reads of a section with kept sums unchecked (off) or checked (on): a
  // store's recovery rereads blocks a crash may have left without their
  // sums, and rewrites them. Needs the write right.
  virtual void set_verify(uint32_t nsid, bool on) = 0;
  // A session on a tree (tree.hpp) for the file API: a directory of this
  // process, or a server's tree dataset as the client's grant allows.
  // Throws deepwell::error naming the tree when there is none this client
  // may use as asked, or a limit it meets.
  virtual std::shared_ptr<tree_session> open_tree(const tree_request& r) = 0;
  // Controller and queue state, for watchdogs and bug reports.
  virtual std::string dump() const = 0;
};

}  // namespace deepwell
