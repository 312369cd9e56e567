// The poller: a thread that serves its queue pairs: fetches each command
// into the controller's own copy, checks it (command_check.hpp), admits it
// against its client's share (share_arbiter.hpp), runs it on the target
// through the io engine and posts the completion.
#include "controller/poller.hpp"

#include <pthread.h>
#include <sys/prctl.h>
#include <sched.h>
#include <time.h>
#include <algorithm>
#include <bit>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "deepwell/common/error.hpp"
#include "deepwell/common/thread_times.hpp"
#include "deepwell/protocol/shared_atomic.hpp"

namespace deepwell {

const controller::ns_entry* controller::poller::ns(uint32_t nsid) const { return owner->find_ns(nsid); }

controller::poller::context* controller::poller::alloc_context() {
  if (!free_contexts) {
    // Grows in blocks; bounded by the sum of queue depths, so steady state
    // never allocates.
    constexpr size_t block = 256;
    context_blocks.push_back(std::make_unique<context[]>(block));
    context* b = context_blocks.back().get();
    for (size_t i = 0; i < block; ++i) {
      b[i].next_free = free_contexts;
      free_contexts = &b[i];
    }
  }
  context* c = free_contexts;
  free_contexts = c->next_free;
  return c;
}

void controller::poller::free_context(context* c) {
  c->next_free = free_contexts;
  free_contexts = c;
}

void controller::poller::fail_queue(queue_pair::impl& q, queue_failure why) {
  if (q.failed) return;
  q.failed = true;
  release_held(q);
  shared_store_relaxed(&q.header->failure, uint32_t(why));
  shared_store_release(&q.header->state, uint32_t(queue_state::failed));
}

// A doorbell the client writes (its SQ tail, its CQ head), read once: a
// value past the ring fails the queue (false) rather than being trusted.
bool controller::poller::read_doorbell(queue_pair::impl& q, const uint32_t* bell, uint32_t entries, queue_failure why,
                                       uint32_t& value) {
  value = shared_load_acquire(bell);
  if (value < entries) return true;
  fail_queue(q, why);
  return false;
}

// An error the poller cannot recover from (an exception out of an io
// engine or an allocation): every queue it serves fails, so clients' waits
// end with controller_lost instead of hanging, and the process goes on.
void controller::poller::fail_all(const char* what) {
  {
    std::lock_guard<std::mutex> lock(owner->mutex_);
    if (owner->failure_.empty()) owner->failure_ = std::string("poller ") + std::to_string(index) + ": " + what;
  }
  if (has_incoming.load()) {
    std::lock_guard<std::mutex> lock(incoming_mutex);
    for (auto& qp : incoming) queues.push_back(std::move(qp));
    incoming.clear();
    regroup();
  }
  for (auto& qp : queues) {
    fail_queue(*qp->impl_, queue_failure::poller_error);
    give_back(*qp->impl_);
    if (qp->impl_->account) qp->impl_->account->waiter(index).since.store(0, std::memory_order_relaxed);
  }
}

void controller::poller::complete(queue_pair::impl& q, uint16_t cid, nvme::status s, bool owns_cid, uint32_t dw0,
                                  uint32_t dw1) {
  if (draining) s = nvme::sc::aborted_sq_deleted;
  if (!s.ok()) q.errors.add(1);
  detail::pending_completion& p = q.pending[(q.pending_head + q.pending_count) % q.pending.size()];
  p.cqe.dw0 = dw0;
  p.cqe.dw1 = dw1;
  p.cqe.sq_id = 0;
  p.cqe.dw3 = nvme::make_cqe_dw3(cid, 0, s);  // phase set when posted
  p.owns_cid = owns_cid;
  ++q.pending_count;
  list_post(q);
}

void controller::poller::list_post(queue_pair::impl& q) {
  if (q.listed_post) return;
  q.listed_post = true;
  to_post.push_back(&q);
}

void controller::poller::list_settle(queue_pair::impl& q) {
  if (q.listed_settle || !q.account) return;
  q.listed_settle = true;
  to_settle.push_back(&q);
}

// The groups, afresh from `queues` (they changed: rare next to passes).
void controller::poller::regroup() {
  // A map, not a search of the groups per queue: a server with thousands
  // of one-queue clients regroups at every connect and disconnect.
  std::unordered_map<const detail::client_account*, bool> was_saturated;
  for (const client_queues& o : groups) was_saturated[o.account] = o.saturated;
  std::unordered_map<const detail::client_account*, size_t> index;
  groups.clear();
  for (auto& qp : queues) {
    queue_pair::impl& q = *qp->impl_;
    const auto [it, added] = index.try_emplace(q.account.get(), groups.size());
    const size_t g = it->second;
    if (added) {
      groups.emplace_back();
      groups.back().account = q.account.get();
      if (const auto w = was_saturated.find(q.account.get()); w != was_saturated.end())
        groups.back().saturated = w->second;
    }
    q.group = uint32_t(g);
    groups[g].queues.push_back(&q);
    if (q.waiting) ++groups[g].waiting;
  }
}

// A command held for its client's share that will never run (its queue
// failed or went) gives the client's activity back.
void controller::poller::release_held(queue_pair::impl& q) {
  if (!q.has_held) return;
  q.has_held = false;
  set_waiting(q, false);
  --q.taken;
  list_settle(q);
}

void controller::poller::set_waiting(queue_pair::impl& q, bool waiting) {
  if (q.waiting == waiting) return;
  q.waiting = waiting;
  uint32_t& g = groups[q.group].waiting;
  if (waiting) {
    ++waiting_queues;
    ++g;
  } else {
    --waiting_queues;
    --g;
  }
}

// Server mode, at the end of a pass while any queue waits for its share
// (and once more after the last stops): each client's waiter_slot for this
// poller gets the oldest of its waiting commands, so other pollers leave
// freed room to it (share_arbiter::older_waiter). Worked out afresh each
// time, not kept up command by command: a slot that outlived its waiter
// would hold the other pollers back for good.
void controller::poller::publish_waiters() {
  bool any = false;
  for (client_queues& g : groups) {
    if (!g.account) continue;
    uint64_t oldest = 0;
    if (g.waiting != 0)
      for (const queue_pair::impl* q : g.queues)
        if (q->waiting && (oldest == 0 || q->held_since < oldest)) oldest = q->held_since;
    detail::waiter_slot& w = g.account->waiter(index);
    if (w.since.load(std::memory_order_relaxed) != oldest) w.since.store(oldest, std::memory_order_relaxed);
    any |= oldest != 0;
  }
  published_waiter = any;
}

// Server mode, once a pass: a finished command's bytes stay with its
// queue as credit for the next ones; a queue running commands gives back
// what the arbiter says is more than it should hold; one that is idle, or
// waits for its share (a command held), gives back all of it, and an idle
// one its client's activity too (fetch told the account when the queue
// took its first command). A waiting queue holding a fragment could
// otherwise keep every queue of its client waiting with nothing in flight.
void controller::poller::give_back(queue_pair::impl& q) {
  if (!q.account) return;
  detail::share_arbiter& arb = *owner->arbiter_;
  detail::client_account& a = *q.account;
  const bool busy = q.taken != 0;
  // Nothing to give and nothing to tell: the account (shared with the
  // other pollers) is not touched. Most of a crowded poller's queues are so.
  if (q.credit == 0 && (busy || !q.told_busy)) return;
  const uint64_t give = busy && !q.has_held ? arb.excess_credit(a, q.credit) : q.credit;
  q.credit -= give;
  if (!busy && q.told_busy) {
    arb.finish(a, 1, give);
    q.told_busy = false;
  } else if (give != 0) {
    arb.finish(a, 0, give);
  }
}

unsigned controller::poller::post(queue_pair::impl& q) {
  if (q.pending_count == 0 || q.failed) return 0;
  uint32_t head = 0;
  if (!read_doorbell(q, &q.header->cq_head_doorbell, q.cq_entries, queue_failure::bad_cq_doorbell, head)) return 0;
  const uint32_t mask = q.cq_entries - 1;
  unsigned n = 0;
  while (q.pending_count != 0 && ((q.cq_tail + 1) & mask) != head) {
    detail::pending_completion& p = q.pending[q.pending_head];
    nvme::completion* e = q.cq + q.cq_tail;
    shared_store_relaxed(&e->dw0, p.cqe.dw0);
    shared_store_relaxed(&e->dw1, p.cqe.dw1);
    // sq_head and sq_id share a dword.
    shared_store_relaxed(reinterpret_cast<uint32_t*>(&e->sq_head), q.sq_head & 0xFFFFu);
    const uint16_t cid = nvme::cqe_cid(p.cqe.dw3);
    if (p.owns_cid) q.set_cid(cid, false);
    shared_store_release(&e->dw3, p.cqe.dw3 | (q.phase << 16));
    q.pending_head = (q.pending_head + 1) % uint32_t(q.pending.size());
    --q.pending_count;
    q.outstanding.store(q.outstanding.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    if (++q.cq_tail == q.cq_entries) {
      q.cq_tail = 0;
      q.phase ^= 1;
    }
    ++n;
  }
  return n;
}

// Starts (or restarts) a read, write or flush on its target.
void controller::poller::issue(context* c) {
  const io_callback done{&on_io_done, c};
  if (c->opcode == nvme::op_read)
    c->ns->data->read(*io, c->buf, c->bytes, c->offset, done);
  else if (c->opcode == nvme::op_write)
    c->ns->data->write(*io, c->buf, c->bytes, c->offset, c->fua, done);
  else
    c->ns->data->flush(*io, done);
}

void controller::poller::on_io_done(void* ctx, int64_t result) {
  auto* c = static_cast<context*>(ctx);
  poller* p = c->p;
  queue_pair::impl& q = *c->q;
  // Interrupted, or out of resources for now: ask again (a bounded number
  // of times, so that a target that always says so still gets an answer).
  constexpr uint32_t max_retries = 64;
  if ((result == -EAGAIN || result == -EINTR) && c->retries < max_retries && !p->draining) {
    ++c->retries;
    p->issue(c);
    return;
  }
  nvme::status s = nvme::sc::success;
  if (result < 0 || (c->opcode != nvme::op_flush && uint64_t(result) != c->bytes)) {
    const int err = result < 0 ? int(-result) : EIO;  // a short transfer is an I/O error
    if (err == ENOSPC || err == EDQUOT)
      s = nvme::sc::capacity_exceeded;
    else if (err == EROFS)
      s = nvme::sc::write_to_read_only;
    else if (err == EFAULT)
      s = nvme::sc::data_transfer_error;
    else if (err == EINVAL)
      s = nvme::sc::internal_error;
    else if (err == EBADMSG || err == EILSEQ)  // bytes that fail their checksum (EILSEQ: dm-integrity)
      s = nvme::sc::guard_check_error;
    else if (c->opcode == nvme::op_read)
      s = nvme::sc::unrecovered_read_error;
    else
      s = nvme::sc::write_fault;  // writes and flushes
  } else if (c->opcode == nvme::op_read) {
    q.bytes_read.add(c->bytes);
  } else if (c->opcode == nvme::op_write) {
    q.bytes_written.add(c->bytes);
  }
  if (q.account)
    p->settle(q, c->opcode, c->cost, c->fetched_ns, s.ok() ? c->bytes : 0, s.ok(), c->admitted_ns, c->ns->info.nsid);
  p->complete(q, c->cid, s, true);
  p->ns_done(c->ns->info.nsid);
  p->free_context(c);
}

// Server mode: the client's account learns a command is done (what it
// moved, its latency), and its share is given back.
void controller::poller::settle(queue_pair::impl& q, uint8_t opcode, uint32_t cost, uint64_t fetched_ns,
                                uint64_t bytes, bool ok, uint64_t admitted_ns, uint32_t nsid) {
  detail::client_counter_shard& a = q.account->shard(index);  // this poller's: no other writes it
  a.commands.add(1);
  if (!ok) a.errors.add(1);
  if (opcode == nvme::op_read) {
    a.reads.add(1);
    a.bytes_read.add(bytes);
  } else if (opcode == nvme::op_write) {
    a.writes.add(1);
    a.bytes_written.add(bytes);
  } else if (opcode == nvme::op_flush) {
    a.flushes.add(1);
  }
  if (opcode == nvme::op_read || opcode == nvme::op_write) {
    const uint64_t t = std::max(clock_ns, fetched_ns);
    a.record_latency(t - fetched_ns);
    // The storage's own latency (from admission), for the latency target;
    // not for commands served on the spot (host memory: no storage).
    if (admitted_ns && ok && cost && t > admitted_ns) owner->arbiter_->completed(nsid, t - admitted_ns, t, index, opcode == nvme::op_read);
  }
  --q.taken;
  q.credit += cost;  // give_back decides what the queue keeps
  list_settle(q);
}

// The bytes a command would move, for its client's share: what its
// namespace's block size makes of its block count when the client may
// name the namespace, else 0 (it fails at once).
uint32_t controller::poller::cost_of(const queue_pair::impl& q, const nvme::command& c) const {
  if (c.opcode != nvme::op_read && c.opcode != nvme::op_write) return 0;
  if (q.grants && q.grants->of(c.nsid) == access_grants::none) return 0;
  const ns_entry* e = ns(c.nsid);
  if (!e) return 0;
  const uint64_t bytes = (uint64_t(c.cdw12 & nvme::cdw12_nlb_mask) + 1) * e->limits.block_size;
  return uint32_t(std::min<uint64_t>(bytes, q.limits.max_transfer));
}

void controller::poller::execute(queue_pair::impl& q, const nvme::command& c, uint32_t cost, uint64_t fetched_ns,
                                 uint64_t admitted_ns) {
  q.commands.add(1);
  q.outstanding.store(q.outstanding.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // Completions that do not go to the target settle the client's account here.
  auto done_now = [&](nvme::status s, bool owns_cid) {
    if (q.account) settle(q, c.opcode, cost, fetched_ns, 0, s.ok());
    complete(q, c.cid, s, owns_cid);
  };
  if (q.cid_is_busy(c.cid)) {
    done_now(nvme::sc::cid_conflict, false);
    return;
  }
  q.set_cid(c.cid, true);
  if (draining) {
    done_now(nvme::sc::aborted_sq_deleted, true);
    return;
  }
  // A namespace the queue's client has no grant for does not exist for it.
  // The entry is looked up once: a namespace retired meanwhile
  // (controller::retire_namespace) stays whole until this turn is over.
  struct lookup_ctx {
    const poller* p;
    const access_grants* grants;
    mutable const ns_entry* found;
  } lc{this, q.grants.get(), nullptr};
  detail::checked_command cc;
  nvme::status s = detail::check_command(
      c, q.limits,
      [](const void* self, uint32_t nsid) -> const detail::ns_limits* {
        const auto* x = static_cast<const lookup_ctx*>(self);
        if (x->grants && x->grants->of(nsid) == access_grants::none) return nullptr;
        x->found = x->p->ns(nsid);
        return x->found ? &x->found->limits : nullptr;
      },
      &lc, cc);
  // A flush makes writes durable at the storage's cost (an fsync of the
  // whole file): only a writer may ask for it.
  if (s.ok() && (cc.opcode == nvme::op_write || cc.opcode == nvme::op_flush) && q.grants &&
      !(q.grants->of(cc.nsid) & access_grants::write))
    s = nvme::sc::write_to_read_only;
  if (!s.ok()) {
    done_now(s, true);
    return;
  }
  const ns_entry& n = *lc.found;
  switch (cc.opcode) {
    case nvme::op_identify: {
      nvme::identify_namespace id{};
      id.nsze = id.ncap = id.nuse = n.info.blocks;
      id.nlbaf = 0;
      id.flbas = 0;
      id.nsattr = n.info.read_only ? 1 : 0;
      id.lbaf[0] = uint32_t(std::countr_zero(n.info.block_size)) << 16;
      id.dw_bytes = n.info.bytes;
      id.dw_block_size = n.info.block_size;
      std::memcpy(q.staging + cc.buffer_offset, &id, sizeof(id));
      done_now(nvme::sc::success, true);
      return;
    }
    case nvme::op_read:
    case nvme::op_write:
    case nvme::op_flush: {
      if (cc.opcode == nvme::op_read)
        q.reads.add(1);
      else if (cc.opcode == nvme::op_write)
        q.writes.add(1);
      else
        q.flushes.add(1);
      context* ctx = alloc_context();
      const uint32_t bytes = cc.opcode == nvme::op_flush ? 0 : cc.bytes;
      *ctx = context{this, &q, c.cid, cc.opcode, bytes, nullptr, &n, q.staging + cc.buffer_offset,
                     cc.byte_offset, cc.fua, 0, cost, fetched_ns, admitted_ns};
      ns_started(n.info.nsid);
      issue(ctx);
      return;
    }
  }
}

// A pass's commands (pass_commands) shared among the clients with queues,
// by weight: a poller's pass then takes about pass_commands in all, so a
// client's next command waits about one share of a pass, however many
// queues the others have (and a poller serving only a flood's queues does
// not crowd the storage and the tier that the others' pollers share).
uint32_t controller::poller::pass_quota(detail::client_account& a) const {
  const uint32_t batch = owner->cfg_.pass_commands;
  const uint32_t clients = owner->clients_with_queues_.load(std::memory_order_relaxed);
  if (clients < 2 || batch == 0) return UINT32_MAX;
  const uint64_t w = a.weight_milli.load(std::memory_order_relaxed);
  return uint32_t(std::clamp<uint64_t>(uint64_t(batch) * w / (1000ull * clients), 1, UINT32_MAX));
}

// One client's turn in a pass: its queues from g.next on, until it has
// taken its quota or was refused its share.
void controller::poller::serve_group(client_queues& g, unsigned& work) {
  const size_t n = g.queues.size();
  if (++g.next >= n) g.next = 0;
  stop_client = false;
  for (size_t i = 0, k = g.next; i < n; ++i, k = k + 1 == n ? 0 : k + 1) {
    queue_pair::impl& q = *g.queues[k];
    const unsigned fetched = fetch(q);
    if (fetched != 0) post(q);
    work += fetched;
    if (stop_client) break;
  }
  g.saturated = stop_client;
}

// What was fetched goes to the storage; what finished is posted, and the
// queues' dealings with their accounts are settled.
void controller::poller::finish_turn(unsigned& work) {
  io->submit();
  if (owner->arbiter_ && io->in_flight() != 0) clock_ns = now_ns();  // the completions reaped now finished by then
  work += io->reap();
  for (size_t i = 0; i < to_post.size();) {
    queue_pair::impl& q = *to_post[i];
    work += post(q);
    if (q.pending_count != 0 && !q.failed) {
      ++i;  // its CQ is full: again next pass
      continue;
    }
    q.listed_post = false;
    to_post[i] = to_post.back();
    to_post.pop_back();
  }
  // Before anything more is fetched: what finished must not be spent again
  // as credit before the arbiter has had its say (give_back), or a probe's
  // one command a client never happens.
  for (size_t i = 0; i < to_settle.size();) {
    queue_pair::impl& q = *to_settle[i];
    give_back(q);
    if (q.credit != 0 || (q.taken == 0 && q.told_busy)) {
      ++i;  // credit it keeps while busy: the arbiter may want it back later
      continue;
    }
    q.listed_settle = false;
    to_settle[i] = to_settle.back();
    to_settle.pop_back();
  }
}

// One pass: each client's turn (serve_group: new commands of its queues,
// at most fetch_batch a queue, what was served on the spot posted before
// the next queue's turn, so the GPU reads it while this poller serves the
// others), storage submissions, their completions, posts and the queues'
// dealings with their accounts (finish_turn). Returns how much happened
// (0: nothing to do).
//
// Clients that did not fill their quota (nor were refused) last pass are
// light and go first, and their commands go to the storage and are posted
// before any flooding client's are fetched: a buffered read through
// io_uring is copied inside the submit call, so a light command submitted
// with a flood's batch waits for the whole batch. A flooding client's
// turn is submitted on its own, and while the floods take their turns the
// light clients are looked at again every light_recheck_ns (or four times
// what the last look took, when they hold many queues): a light command
// that arrives during a pass waits about one flooding client's turn, not
// the whole pass.
unsigned controller::poller::serve_pass() {
  unsigned work = 0;
  passes.store(++pass_no, std::memory_order_relaxed);
  const size_t ng = groups.size();
  if (++first_group >= ng) first_group = 0;
  light.clear();
  heavy.clear();
  for (size_t i = 0, k = first_group; i < ng; ++i, k = k + 1 == ng ? 0 : k + 1)
    (groups[k].saturated ? heavy : light).push_back(uint32_t(k));
  if (heavy.empty() || light.empty()) {
    for (const uint32_t k : light) serve_group(groups[k], work);
    for (const uint32_t k : heavy) {
      serve_group(groups[k], work);
      finish_turn(work);
    }
  } else {
    // A look at the light clients costs a doorbell read a queue: it is
    // taken again only after four times as long as it took (however many
    // queues they hold, the floods keep at least four fifths of the pass).
    uint64_t light_at = now_ns();
    for (const uint32_t k : light) serve_group(groups[k], work);
    finish_turn(work);
    uint64_t t = now_ns();
    uint64_t light_cost = t - light_at;
    light_at = t;
    for (const uint32_t k : heavy) {
      serve_group(groups[k], work);
      finish_turn(work);
      t = now_ns();
      if (t - light_at < std::max(light_recheck_ns, 4 * light_cost)) continue;
      for (const uint32_t l : light)
        if (!groups[l].saturated) serve_group(groups[l], work);
      finish_turn(work);
      light_at = now_ns();
      light_cost = light_at - t;
    }
  }
  finish_turn(work);
  if (waiting_queues != 0 || published_waiter) publish_waiters();
  return work;
}

unsigned controller::poller::fetch(queue_pair::impl& q) {
  // A deleted queue takes no new command (its client is gone, or said it
  // was done); one that is quiescing for a drop waits a moment.
  if (q.failed || quiescing || q.deleted.load(std::memory_order_acquire)) return 0;
  // Server mode: a client that took its pass's quota already waits for the
  // next pass, its doorbells not even read.
  detail::client_counter_shard* pass_shard = nullptr;
  uint32_t quota = UINT32_MAX;
  if (q.account && (quota = pass_quota(*q.account)) != UINT32_MAX) {
    pass_shard = &q.account->shard(index);
    if (pass_shard->pass != pass_no) {
      pass_shard->pass = pass_no;
      pass_shard->pass_fetched = 0;
    }
    if (pass_shard->pass_fetched >= quota) {
      stop_client = true;
      return 0;
    }
  }
  uint32_t tail = 0;
  if (!read_doorbell(q, &q.header->sq_tail_doorbell, q.sq_entries, queue_failure::bad_sq_doorbell, tail)) return 0;
  const uint32_t limit = q.cq_entries - 1;
  unsigned n = 0;
  const uint32_t batch = owner->cfg_.fetch_batch ? owner->cfg_.fetch_batch : UINT32_MAX;
  if (!q.account) {
    while (q.sq_head != tail && q.outstanding.load(std::memory_order_relaxed) < limit && n < batch) {
      // Copy once; everything after works on the copy, so a client rewriting
      // the slot cannot change a command after it was checked.
      nvme::command c;
      std::memcpy(&c, static_cast<const void*>(q.sq + q.sq_head), sizeof(c));
      q.sq_head = (q.sq_head + 1) & (q.sq_entries - 1);
      execute(q, c, 0, 0);
      ++n;
    }
    return n;
  }
  // Server mode: each command waits for its client's share of the budget.
  // One that must wait is held here (already copied: it stays the command
  // that gets checked), and the queue is left until the next pass. Commands
  // use the queue's credit (give_back); when it runs short, the share is
  // reserved for as many commands as the queue has waiting (up to the
  // batch) in one step, not one command at a time.
  if (!q.has_held && q.sq_head == tail) return 0;  // nothing new: no clock read
  list_settle(q);  // whatever happens below, its dealings with the account may change
  detail::share_arbiter& arb = *owner->arbiter_;
  detail::client_account& acct = *q.account;
  const uint64_t t = clock_ns = now_ns();
  const uint32_t taken_before = pass_shard ? pass_shard->pass_fetched : 0;
  const uint32_t room = quota == UINT32_MAX ? UINT32_MAX : quota - taken_before;
  while ((q.has_held || q.sq_head != tail) && q.outstanding.load(std::memory_order_relaxed) < limit && n < batch &&
         n < room) {
    if (!q.has_held) {
      std::memcpy(&q.held, static_cast<const void*>(q.sq + q.sq_head), sizeof(q.held));
      q.sq_head = (q.sq_head + 1) & (q.sq_entries - 1);
      q.has_held = true;
      q.held_since = t;
      ++q.taken;
      if (!q.told_busy) {  // its client is active from its first command (other clients' shares shrink)
        arb.begin(acct);
        q.told_busy = true;
      }
    }
    const uint32_t cost = cost_of(q, q.held);
    // Stopping: everything is aborted at once, shares do not matter.
    if (draining) {
      q.has_held = false;
      set_waiting(q, false);
      execute(q, q.held, 0, q.held_since);
      ++n;
      continue;
    }
    if (q.credit < cost) {
      // Room for this command and those behind it in the SQ (taken this
      // pass), unless another poller's command has waited longer for it.
      const uint64_t waiting = (tail - q.sq_head) & (q.sq_entries - 1);
      const uint64_t more = std::min<uint64_t>({waiting, batch - n - 1, limit - 1 - q.outstanding.load(std::memory_order_relaxed)});
      const uint64_t got = arb.older_waiter(acct, index, q.held_since)
                               ? 0
                               : arb.reserve(acct, cost - q.credit, (more + 1) * uint64_t(cost) - q.credit);
      if (got == 0) {
        acct.shard(index).throttled.add(1);
        set_waiting(q, true);
        stop_client = true;  // its other queues would be refused too
        break;
      }
      q.credit += got;
    }
    if (!arb.rate_allows(acct, cost, t)) {
      acct.shard(index).throttled.add(1);
      set_waiting(q, true);
      stop_client = true;
      break;
    }
    q.credit -= cost;
    q.has_held = false;
    set_waiting(q, false);
    execute(q, q.held, cost, q.held_since, t);
    ++n;
  }
  if (pass_shard) {
    pass_shard->pass_fetched = taken_before + n;
    if (n >= room) stop_client = true;
  }
  return n;
}

void controller::poller::adopt_incoming() {
  std::lock_guard<std::mutex> lock(incoming_mutex);
  for (auto& qp : incoming) queues.push_back(std::move(qp));
  incoming.clear();
  has_incoming.store(false, std::memory_order_relaxed);
  regroup();
  if (owner->cfg_.register_buffers && io->in_flight() == 0) register_staging();
}

void controller::poller::register_staging() {
  // Fixed buffers spare the kernel a page-table walk per request. The
  // engine falls back to plain buffers when RLIMIT_MEMLOCK says no.
  std::vector<iovec> iov;
  for (auto& qp : queues) iov.push_back(iovec{qp->impl_->staging, size_t(qp->impl_->limits.staging_bytes)});
  io->unregister_buffers();
  if (!iov.empty()) io->register_buffers(iov.data(), unsigned(iov.size()));
}

void controller::poller::drop_deleted() {
  // Cleared before the scan, and set again only for what is left: a
  // delete_queue_pair() that lands during the scan sets it after this, so
  // the next pass looks again (storing false at the end lost such a
  // delete, and its queue stayed until the controller went).
  has_deleted.exchange(false, std::memory_order_acq_rel);
  if (has_incoming.load(std::memory_order_acquire)) adopt_incoming();  // a queue deleted right after it was made
  // A deleted queue goes once no I/O of its own is in flight (the target
  // writes into its staging). Completions it could not post are dropped
  // with it: nobody will read them, and a client that stopped moving its
  // CQ head (or filled its CQ on purpose) must not pin the queue's memory.
  bool waiting = false, ready = false;
  for (auto& qp : queues) {
    queue_pair::impl& q = *qp->impl_;
    if (!q.deleted.load(std::memory_order_acquire)) continue;
    if (q.outstanding.load(std::memory_order_relaxed) - q.pending_count != 0)
      waiting = true;
    else
      ready = true;
  }
  // The engine finds a request's fixed buffer by its address: a buffer
  // registered over memory that is unmapped (and perhaps mapped again for
  // another queue) would read into the old pages. So deleted queues go only
  // at a moment with no I/O in flight, and the rest are registered again;
  // until then no queue takes new commands (quiescing), which on a busy
  // server costs one storage latency per drop rather than never dropping.
  if (ready && owner->cfg_.register_buffers && io->in_flight() != 0) {
    quiescing = true;
    has_deleted.store(true, std::memory_order_release);  // look again next pass
    return;
  }
  quiescing = false;
  bool dropped = false;
  for (size_t i = 0; ready && i < queues.size();) {
    queue_pair::impl& q = *queues[i]->impl_;
    if (!q.deleted.load(std::memory_order_acquire) ||
        q.outstanding.load(std::memory_order_relaxed) - q.pending_count != 0) {
      ++i;
      continue;
    }
    q.pending_count = 0;
    q.outstanding.store(0, std::memory_order_relaxed);
    release_held(q);
    if (q.account) {
      // Its client's slot may name this queue's command; the next publish
      // (another queue of the client still waiting) sets it again.
      q.account->waiter(index).since.store(0, std::memory_order_relaxed);
      give_back(q);
      if (q.account->queues.fetch_sub(1, std::memory_order_relaxed) == 1)
        owner->clients_with_queues_.fetch_sub(1, std::memory_order_relaxed);
    }
    std::erase(to_post, &q);
    std::erase(to_settle, &q);
    queues.erase(queues.begin() + long(i));
    dropped = true;
  }
  if (dropped) regroup();
  if (dropped && owner->cfg_.register_buffers) register_staging();
  if (waiting) has_deleted.store(true, std::memory_order_release);
}

void controller::poller::run() {
  // Short sleeps stay short (the default timer slack stretches every sleep
  // by up to 50 us).
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  clockid_t cid;
  if (pthread_getcpuclockid(pthread_self(), &cid) == 0) {
    cpu_clock.store(cid);
    cpu_clock_valid.store(true);
  }
  try {
    serve_until_stopped();
    drain();
  } catch (const std::exception& e) {
    fail_all(e.what());
  } catch (...) {
    fail_all("unknown exception");
  }
  timespec ts;
  if (cpu_clock_valid.load() && clock_gettime(cpu_clock.load(), &ts) == 0)
    final_cpu_seconds.store(double(ts.tv_sec) + ts.tv_nsec * 1e-9);
  cpu_clock_valid.store(false);
}

void controller::poller::serve_until_stopped() {
  const uint64_t spin_ns = uint64_t(owner->cfg_.spin_us) * 1000;
  const uint64_t max_sleep_ns = uint64_t(owner->cfg_.max_sleep_us) * 1000;
  // When the first empty pass after work came (0: the last pass found work).
  // Busy passes read no clock: at millions of requests a second the clock
  // was a few percent of a poller's time.
  uint64_t idle_since = 0;
  uint64_t sleep_ns = 1000;
  while (!owner->stopping_.load(std::memory_order_acquire)) {
    turns.fetch_add(1);  // sequentially consistent: see retire_namespace
    if (has_incoming.load(std::memory_order_relaxed)) adopt_incoming();
    if (has_deleted.load(std::memory_order_relaxed)) drop_deleted();
    const unsigned work = serve_pass();
    if (work != 0) {
      idle_since = 0;
      sleep_ns = 1000;
      continue;
    }
    if (io->in_flight() != 0) {
      // Waiting for storage: block briefly in the kernel, then look at the
      // doorbells again.
      io->wait(20000);
      continue;
    }
    const uint64_t t = now_ns();
    if (idle_since == 0) idle_since = t;
    if (t - idle_since < spin_ns) {
      spin_pause();
      continue;
    }
    // No queue at all (a server with no client): no doorbell can ring, only
    // a new queue or stop() can come. Block until one does, instead of
    // waking every max_sleep_us for nothing (an idle `deepwell serve` used
    // 9% of a core that way).
    if (queues.empty() && waiting_queues == 0 && !published_waiter) {
      std::unique_lock<std::mutex> lock(incoming_mutex);
      parked.store(true);  // holds no namespace entry while it waits
      incoming_cv.wait(lock, [&] {
        return has_incoming.load(std::memory_order_relaxed) || owner->stopping_.load(std::memory_order_acquire);
      });
      parked.store(false);
      idle_since = 0;
      sleep_ns = 1000;
      continue;
    }
    // Idle: sleep in growing steps so an idle controller costs nothing, while
    // the first request after a pause waits at most max_sleep_us; a queue
    // waiting for its share looks again within 20 us (other pollers leave
    // freed room to it: it must not sleep on it).
    timespec ts{0, long(waiting_queues != 0 ? std::min<uint64_t>(sleep_ns, 20000) : sleep_ns)};
    nanosleep(&ts, nullptr);
    sleep_ns = std::min(sleep_ns * 2, max_sleep_ns);
  }
}

void controller::poller::drain() {
  if (has_incoming.load()) adopt_incoming();
  draining = true;
  const uint64_t deadline = now_ns() + uint64_t(owner->cfg_.stop_timeout_ms) * 1000000ull;
  for (;;) {
    const unsigned work = serve_pass();  // fetched commands are aborted at once: draining
    bool pending = io->in_flight() != 0;
    for (auto& qp : queues) pending |= (!qp->impl_->failed && qp->impl_->pending_count != 0);
    if (!pending && work == 0) break;
    if (now_ns() > deadline) break;
    if (io->in_flight() != 0)
      io->wait(1000000);
    else if (work == 0)
      sched_yield();
  }
  for (auto& qp : queues) {
    if (!qp->impl_->failed) shared_store_release(&qp->impl_->header->state, uint32_t(queue_state::stopped));
  }
}

}  // namespace deepwell
