#include "deepwell/controller/controller.hpp"

#include <time.h>

#include <algorithm>
#include <sstream>
#include <system_error>
#include <thread>

#include "controller/poller.hpp"
#include "deepwell/common/detail/staging_copy.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/common/thread_times.hpp"
#include "deepwell/protocol/shared_atomic.hpp"

namespace deepwell {

queue_counters& queue_counters::operator+=(const queue_counters& o) {
  commands += o.commands;
  reads += o.reads;
  writes += o.writes;
  flushes += o.flushes;
  bytes_read += o.bytes_read;
  bytes_written += o.bytes_written;
  errors += o.errors;
  return *this;
}

queue_pair::queue_pair(uint32_t id, const qp_geometry& g, shared_region region)
    : id_(id), geometry_(g), region_(std::move(region)), impl_(std::make_unique<impl>()) {}
queue_pair::~queue_pair() = default;

queue_state queue_pair::state() const { return queue_state(shared_load_acquire(&header()->state)); }

queue_counters queue_pair::counters() const {
  queue_counters c;
  c.commands = impl_->commands.get();
  c.reads = impl_->reads.get();
  c.writes = impl_->writes.get();
  c.flushes = impl_->flushes.get();
  c.bytes_read = impl_->bytes_read.get();
  c.bytes_written = impl_->bytes_written.get();
  c.errors = impl_->errors.get();
  return c;
}

// ---------------------------------------------------------------------------
// controller

controller::controller(controller_config cfg)
    : cfg_(cfg),
      slots_(std::make_unique<std::atomic<ns_entry*>[]>(max_namespaces)),
      owned_(std::make_unique<std::unique_ptr<ns_entry>[]>(max_namespaces)) {
  if (cfg_.pollers == 0) throw error("controller needs at least one poller thread (pollers = 0)");
  // Settings the pollers read: a bad one named here, in the caller's
  // thread, not thrown on a poller (which fails every queue: "controller lost").
  (void)detail::default_staging_stores();
  if (cfg_.pollers > 256) throw error("controller pollers " + std::to_string(cfg_.pollers) + ": at most 256");
  if (cfg_.latency_target != 0 && !(cfg_.latency_target >= 1 && cfg_.latency_target <= 1000))
    throw error("latency_target must be 0 (off) or a factor from 1 to 1000, not " + std::to_string(cfg_.latency_target));
  if (cfg_.io_budget_bytes != 0) {
    detail::latency_target lt;
    lt.factor = cfg_.latency_target;
    arbiter_ = std::make_unique<detail::share_arbiter>(cfg_.io_budget_bytes, lt, max_namespaces, cfg_.pollers);
  }
  const io_backend backend = cfg_.backend;
  for (unsigned i = 0; i < cfg_.pollers; ++i) {
    auto p = std::make_unique<poller>();
    p->owner = this;
    p->index = i;
    p->io = make_io_engine(backend, cfg_.io_depth);
    p->ns_in_flight = std::make_unique<std::atomic<uint32_t>[]>(max_namespaces);
    pollers_.push_back(std::move(p));
  }
  for (auto& p : pollers_) {
    try {
      p->thread = std::thread([q = p.get()] { q->run(); });
    } catch (const std::system_error& e) {  // the pollers started so far stopped, not left joinable
      stop();
      throw error("controller: cannot start poller " + std::to_string(p->index) + " of " +
                  std::to_string(cfg_.pollers) + ": " + e.what());
    }
    // Named, so that top, perf and gdb tell pollers from other threads.
    name_thread(p->thread, "dw-poller-" + std::to_string(p->index));
  }
}

controller::~controller() { stop(); }

void controller::stop() {
  stopping_.store(true);
  for (auto& p : pollers_) {
    { std::lock_guard<std::mutex> lock(p->incoming_mutex); }  // a poller between its check and its wait sees stopping_
    p->incoming_cv.notify_all();
  }
  for (auto& p : pollers_)
    if (p->thread.joinable()) p->thread.join();
}

uint32_t controller::add_namespace(const namespace_config& cfg) {
  if (!cfg.data) throw error("add_namespace: no target given");
  const uint32_t bs = cfg.block_size;
  if (bs < 512 || bs > 65536 || (bs & (bs - 1)) != 0)
    throw error("unsupported block size " + std::to_string(bs) +
                ": must be a power of two from 512 to 65536 bytes");
  const uint32_t align = cfg.data->io_alignment();
  if (align > 1 && bs % align != 0)
    throw error("block size " + std::to_string(bs) + " is smaller than (or not a multiple of) the direct-I/O alignment " +
                std::to_string(align) + " of " + cfg.data->describe());
  const bool read_only = cfg.read_only || !cfg.data->writable();
  const uint64_t bytes = cfg.data->size();
  if (bytes == 0) throw error("dataset " + cfg.data->describe() + " is empty");
  if (!read_only && bytes % bs != 0)
    throw error("writable dataset " + cfg.data->describe() + " has " + std::to_string(bytes) +
                " bytes, not a whole number of " + std::to_string(bs) +
                "-byte blocks (only read-only datasets may end in a partial block)");
  std::lock_guard<std::mutex> lock(mutex_);
  collect_retired();
  // A server full of retired sections: they go free within a poller's turn
  // or its longest sleep (max_sleep_us), or once their I/O is done.
  for (int waited_ms = 0; free_ids_.empty() && ns_count_.load() == max_namespaces && !retired_.empty() && waited_ms < 200;
       ++waited_ms) {
    mutex_.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    mutex_.lock();
    collect_retired();
  }
  uint32_t nsid = 0;
  if (!free_ids_.empty()) {
    const auto lowest = std::min_element(free_ids_.begin(), free_ids_.end());
    nsid = *lowest;
    free_ids_.erase(lowest);
  } else if (ns_count_.load() < max_namespaces) {
    nsid = ns_count_.load() + 1;
  } else {
    throw error("too many namespaces (at most " + std::to_string(max_namespaces) + ")");
  }
  auto e = std::make_unique<ns_entry>();
  e->data = cfg.data;
  e->limits.block_size = bs;
  e->limits.blocks = (bytes + bs - 1) / bs;
  e->limits.read_only = read_only;
  e->limits.memory_alignment = std::max<uint32_t>(1, cfg.data->memory_alignment());
  e->info = namespace_info{nsid, bs, e->limits.blocks, bytes, read_only, cfg.data->describe(),
                           "the controller in this process (" + backend_name() + ")"};
  slots_[nsid - 1].store(e.get());
  owned_[nsid - 1] = std::move(e);
  if (nsid > ns_count_.load()) ns_count_.store(nsid);
  ns_live_.fetch_add(1);
  return nsid;
}

void controller::retire_namespace(uint32_t nsid) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (nsid == 0 || nsid > ns_count_.load() || !owned_[nsid - 1]) return;
  // The empty slot first, then the pollers' turns (both sequentially
  // consistent): a poller whose turn began after that load sees the
  // empty slot; one whose turn had begun may hold the entry until the
  // turn ends, and its commands in flight until they are done.
  slots_[nsid - 1].store(nullptr);
  retired_ns r{nsid, std::move(owned_[nsid - 1]), {}};
  for (const auto& p : pollers_) r.turns.push_back(p->parked.load() ? UINT64_MAX : p->turns.load());
  retired_.push_back(std::move(r));
  ns_live_.fetch_sub(1);
  collect_retired();
}

void controller::collect_retired() {
  for (size_t i = 0; i < retired_.size();) {
    retired_ns& r = retired_[i];
    bool held = false;
    for (size_t k = 0; k < pollers_.size() && !held; ++k) {
      const poller& p = *pollers_[k];
      const bool moved_on = r.turns[k] == UINT64_MAX || p.parked.load() || p.turns.load() != r.turns[k];
      held = !moved_on || p.ns_in_flight[r.nsid - 1].load(std::memory_order_acquire) != 0;
    }
    if (held) {
      ++i;
      continue;
    }
    free_ids_.push_back(r.nsid);
    retired_[i] = std::move(retired_.back());
    retired_.pop_back();
  }
}

const controller::ns_entry* controller::find_ns(uint32_t nsid) const {
  const uint32_t n = ns_count_.load(std::memory_order_acquire);
  if (nsid == 0 || nsid > n) return nullptr;
  return slots_[nsid - 1].load();
}

// Other threads than the pollers look entries up under mutex_: an entry is
// freed under it (collect_retired).
namespace_info controller::info(uint32_t nsid) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const ns_entry* e = find_ns(nsid);
  if (!e)
    throw error("no namespace " + std::to_string(nsid) + " (this controller has " + std::to_string(namespace_count()) +
                ")");
  return e->info;
}

uint32_t controller::namespace_count() const { return ns_live_.load(std::memory_order_acquire); }

void* controller::host_pointer(uint32_t nsid) const {
  const auto t = target_of(nsid);
  return t ? t->host_pointer() : nullptr;
}

std::shared_ptr<host_mapping> controller::map_readonly(uint32_t nsid) const {
  const auto t = target_of(nsid);
  return t ? t->map_readonly() : nullptr;
}

std::shared_ptr<host_mapping> controller::map_tier(uint32_t nsid) const {
  const auto t = target_of(nsid);
  return t ? t->map_tier() : nullptr;
}

std::shared_ptr<target> controller::target_of(uint32_t nsid) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const ns_entry* e = find_ns(nsid);
  return e ? e->data : nullptr;
}

static_assert(controller::max_namespaces <= access_grants::max_nsid, "grants must cover every namespace id");

std::shared_ptr<queue_pair> controller::create_queue_pair(const qp_geometry& g, const queue_options& opts) {
  auto pow2 = [](uint32_t v) { return v >= 2 && v <= 65536 && (v & (v - 1)) == 0; };
  if (!pow2(g.sq_entries) || !pow2(g.cq_entries))
    throw error("queue entries must be powers of two from 2 to 65536 (got SQ " + std::to_string(g.sq_entries) +
                ", CQ " + std::to_string(g.cq_entries) + ")");
  if (g.slot_bytes == 0 || g.slot_bytes % 512 != 0)
    throw error("staging slot size " + std::to_string(g.slot_bytes) + " is not a positive multiple of 512 bytes");
  if (stopping_.load()) throw error("create_queue_pair: the controller is stopped");
  const qp_layout l = compute_layout(g);
  std::lock_guard<std::mutex> lock(mutex_);
  const uint32_t qid = next_qid_++;
  auto region = shared_region::create(l.total_bytes, "deepwell-qp" + std::to_string(qid));
  auto* h = static_cast<qp_header*>(region.data());
  *h = qp_header{.magic = qp_magic, .version = qp_version, .qid = qid, .sq_entries = g.sq_entries,
                 .cq_entries = g.cq_entries, .depth = g.depth(), .slot_bytes = g.slot_bytes, .reserved = 0,
                 .sq_offset = l.sq_offset, .cq_offset = l.cq_offset, .staging_offset = l.staging_offset,
                 .staging_bytes = l.staging_bytes, .total_bytes = l.total_bytes, .sq_tail_doorbell = 0,
                 .cq_head_doorbell = 0, .state = uint32_t(queue_state::running), .failure = 0};
  std::shared_ptr<queue_pair> qp(new queue_pair(qid, g, std::move(region)));
  auto& im = *qp->impl_;
  auto* base = static_cast<uint8_t*>(qp->base());
  im.header = h;
  im.sq = reinterpret_cast<nvme::command*>(base + l.sq_offset);
  im.cq = reinterpret_cast<nvme::completion*>(base + l.cq_offset);
  im.staging = base + l.staging_offset;
  im.sq_entries = g.sq_entries;
  im.cq_entries = g.cq_entries;
  im.limits.staging_bytes = l.staging_bytes;
  im.limits.max_transfer = g.slot_bytes;
  im.pending.resize(g.cq_entries);
  im.grants = opts.grants;
  qp->client_ = opts.client;
  if (arbiter_) {
    im.account = arbiter_->account(opts.client);
    if (im.account->queues.fetch_add(1, std::memory_order_relaxed) == 0)
      clients_with_queues_.fetch_add(1, std::memory_order_relaxed);
  }
  queues_.push_back(qp);
  poller& p = *pollers_[(qid - 1) % pollers_.size()];
  {
    std::lock_guard<std::mutex> l2(p.incoming_mutex);
    p.incoming.push_back(qp);
    p.has_incoming.store(true, std::memory_order_release);
  }
  p.incoming_cv.notify_one();  // a poller with no queues is blocked
  return qp;
}

void controller::delete_queue_pair(uint32_t qid) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < queues_.size(); ++i) {
    if (queues_[i]->id() != qid) continue;
    deleted_counters_ += queues_[i]->counters();
    queues_[i]->impl_->deleted.store(true, std::memory_order_release);
    pollers_[(qid - 1) % pollers_.size()]->has_deleted.store(true, std::memory_order_release);
    queues_.erase(queues_.begin() + long(i));
    return;
  }
}

void controller::set_client_share(uint32_t client, const client_share& s) {
  if (!arbiter_) throw error("client shares need a controller with an I/O budget (io_budget_bytes > 0: server mode)");
  arbiter_->set_share(client, s);
}

uint64_t controller::io_budget_now() const { return arbiter_ ? arbiter_->budget() : 0; }
uint64_t controller::latency_floor_ns(uint32_t nsid) const { return arbiter_ ? arbiter_->latency_floor_ns(nsid) : 0; }

client_counters controller::client_stats(uint32_t client) const {
  if (!arbiter_) return {};
  auto a = arbiter_->find(client);
  return a ? a->snapshot() : client_counters{};
}

void controller::forget_client(uint32_t client) {
  if (arbiter_) arbiter_->forget(client);
}

size_t controller::client_account_count() const { return arbiter_ ? arbiter_->account_count() : 0; }

uint64_t controller::poller_passes() const {
  uint64_t n = 0;
  for (const auto& p : pollers_) n += p->passes.load(std::memory_order_relaxed);
  return n;
}

uint32_t controller::queue_pair_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return uint32_t(queues_.size());
}

queue_counters controller::counters(uint32_t qid) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& q : queues_)
    if (q->id() == qid) return q->counters();
  throw error("no queue pair " + std::to_string(qid) + " (deleted, or never created)");
}

std::string controller::backend_name() const { return pollers_.empty() ? "none" : pollers_[0]->io->name(); }

double controller::poller_cpu_seconds() const {
  double s = 0;
  for (auto& p : pollers_) {
    timespec ts;
    if (p->cpu_clock_valid.load() && clock_gettime(p->cpu_clock.load(), &ts) == 0)
      s += double(ts.tv_sec) + ts.tv_nsec * 1e-9;
    else
      s += p->final_cpu_seconds.load();
  }
  return s;
}

queue_counters controller::total_counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_counters c = deleted_counters_;
  for (auto& q : queues_) c += q->counters();
  return c;
}

std::string controller::dump() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream o;
  o << "controller: " << pollers_.size() << " poller(s), backend " << backend_name() << ", "
    << ns_live_.load() << " namespace(s)" << (stopping_.load() ? ", stopped" : "") << "\n";
  if (!failure_.empty()) o << "  failed: " << failure_ << "\n";
  for (auto& q : queues_) {
    const qp_header* h = q->header();
    const queue_counters c = q->counters();
    o << "  qp " << q->id() << ": state " << shared_load_relaxed(&h->state) << " failure "
      << shared_load_relaxed(&h->failure) << ", sq " << q->geometry().sq_entries << " tail doorbell "
      << shared_load_relaxed(&h->sq_tail_doorbell) << ", cq " << q->geometry().cq_entries << " head doorbell "
      << shared_load_relaxed(&h->cq_head_doorbell) << ", outstanding "
      << q->impl_->outstanding.load(std::memory_order_relaxed) << ", commands " << c.commands << " errors "
      << c.errors << " read " << c.bytes_read << " B written " << c.bytes_written << " B\n";
  }
  return o.str();
}

}  // namespace deepwell
