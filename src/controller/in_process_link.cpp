// The link to a controller in this process. A queue pair's handle carries
// its memfd and geometry, as a server would hand them to another process;
// here the client uses the controller's own mapping of that memory.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>

#include "deepwell/controller/controller.hpp"
#include "deepwell/link/controller_link.hpp"
#include "deepwell/link/host_client.hpp"
#include "targets/local_tree.hpp"
#include "targets/section_target.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/targets/target.hpp"

namespace deepwell {

namespace {

// A handle over the controller's own mapping of qp's memfd, keeping qp
// alive; on_close runs when it goes.
std::unique_ptr<queue_pair_handle> handle_over(std::shared_ptr<queue_pair> qp, std::function<void()> on_close) {
  const uint32_t id = qp->id();
  const qp_geometry g = qp->geometry();
  void* base = qp->base();
  const size_t bytes = qp->bytes();
  const int fd = qp->memfd();
  return std::make_unique<queue_pair_handle>(id, g, base, bytes, fd,
                                             [keep = std::move(qp), close = std::move(on_close)] {
                                               if (close) close();
                                             });
}

class in_process final : public controller_link {
 public:
  in_process(controller& ctl, std::shared_ptr<controller> owned) : ctl_(ctl), owned_(std::move(owned)) {}

  std::unique_ptr<queue_pair_handle> open_queue_pair(const qp_geometry& g) override {
    std::shared_ptr<queue_pair> qp = ctl_.create_queue_pair(g);
    const uint32_t id = qp->id();
    // In one process the client uses the controller's own mapping of the
    // memfd (a second one would only cost address space; another process
    // maps the memfd itself: the handle's memfd constructor). Deleting the
    // queue pair needs the controller: an owning link's handles keep it
    // alive.
    return handle_over(std::move(qp), [ctl = &ctl_, keep = owned_, id] { ctl->delete_queue_pair(id); });
  }

  namespace_info info(uint32_t nsid) const override { return ctl_.info(nsid); }

  std::shared_ptr<const host_mapping> map_dataset(uint32_t nsid, bool files) const override {
    if (void* p = ctl_.host_pointer(nsid)) {
      const namespace_info i = ctl_.info(nsid);
      auto m = std::make_shared<host_mapping>();
      m->data = static_cast<const uint8_t*>(p);
      m->bytes = i.bytes;
      m->base = p;
      m->base_bytes = (i.bytes + 4095) / 4096 * 4096;  // host-memory targets allocate whole pages
      m->resident = 1.0;
      m->writable = !i.read_only;
      // The memory is the target's, which the controller holds as long as
      // it lives: keep the controller (when this link owns it).
      m->owner = owned_ ? std::shared_ptr<const void>(owned_)
                        : std::shared_ptr<const void>(&ctl_, [](const void*) {});  // the caller keeps it alive
      return m;
    }
    if (!files) return nullptr;
    return ctl_.map_readonly(nsid);
  }

  std::shared_ptr<const host_mapping> map_tier(uint32_t nsid) const override { return ctl_.map_tier(nsid); }

  uint32_t open_dataset(const dataset_request& r) override {
    if (r.name.empty()) throw error("open_dataset: no file named");
    file_options fo;
    fo.direct = r.direct;
    fo.writable = r.writable;
    std::shared_ptr<target> t = open_file_target(r.name, fo);
    // Writes are whole blocks: a writable file's dataset is its whole
    // blocks (bytes after the last one are outside it, as they are of any
    // store or section kept in it).
    const uint64_t whole = r.block_size ? t->size() / r.block_size * r.block_size : t->size();
    if (r.writable && whole != t->size() && whole != 0) {
      fo.length = whole;
      t = open_file_target(r.name, fo);
    }
    return ctl_.add_namespace({std::move(t), r.block_size, !r.writable});
  }

  uint32_t open_section(const section_request& r) override {
    std::shared_ptr<target> t = ctl_.target_of(r.dataset);
    if (!t) throw error("open_section: no namespace " + std::to_string(r.dataset));
    if (r.writable && ctl_.info(r.dataset).read_only)
      throw error("open_section: namespace " + std::to_string(r.dataset) + " (" + t->describe() + ") is read-only");
    return ctl_.add_namespace({detail::make_section_target(t, r), r.block_size, !r.writable});
  }

  section_checks checks(uint32_t nsid) const override {
    std::shared_ptr<target> t = ctl_.target_of(nsid);
    return t ? detail::section_target_checks(*t) : section_checks{};
  }

  void set_verify(uint32_t nsid, bool on) override {
    std::shared_ptr<target> t = ctl_.target_of(nsid);
    if (!t) throw error("set_verify: no namespace " + std::to_string(nsid));
    detail::section_target_verify(*t, on);
  }

  // Each session its own namespace: its windows are its client's alone.
  std::shared_ptr<tree_session> open_tree(const tree_request& r) override {
    if (r.name.empty()) throw error("open_tree: no directory named");
    const int fd = ::open(r.name.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw error("open_tree: root " + r.name + " cannot be opened as a directory: " + std::strerror(errno));
    ::close(fd);
    std::shared_ptr<target> windows = detail::make_tree_windows(r.name);
    const uint32_t nsid = ctl_.add_namespace({windows, 512, false});
    return detail::make_local_tree(r, std::move(windows), nsid);
  }

  std::string dump() const override { return ctl_.dump(); }
  const controller& ctl() const { return ctl_; }

 private:
  controller& ctl_;
  std::shared_ptr<controller> owned_;
};

}  // namespace

std::unique_ptr<queue_pair_handle> client_handle(std::shared_ptr<queue_pair> qp) {
  if (!qp) throw error("client_handle: no queue pair");
  return handle_over(std::move(qp), nullptr);
}

host_queue_client::host_queue_client(std::shared_ptr<queue_pair> qp) : host_queue_client(client_handle(std::move(qp))) {}

std::shared_ptr<controller_link> in_process_link(std::shared_ptr<controller> ctl) {
  controller& c = *ctl;
  return std::make_shared<in_process>(c, std::move(ctl));
}

std::shared_ptr<controller_link> in_process_link(controller& ctl) { return std::make_shared<in_process>(ctl, nullptr); }

embedded_namespace embed_target(std::shared_ptr<target> data, uint32_t block_size, bool read_only,
                                const controller_config& cfg) {
  auto ctl = std::make_shared<controller>(cfg);
  const uint32_t nsid = ctl->add_namespace({std::move(data), block_size, read_only});
  return {in_process_link(std::move(ctl)), nsid};
}

std::optional<embedded_counters> counters_of(const controller_link& link) {
  const auto* p = dynamic_cast<const in_process*>(&link);
  if (!p) return std::nullopt;
  const controller& c = p->ctl();
  return embedded_counters{c.backend_name(), c.total_counters(), c.poller_cpu_seconds()};
}

}  // namespace deepwell
