// The file API's service threads (file_system_impl.hpp): each answers its
// slots a batch at a time around one hold of the tables' lock, and sends
// the tree session its ops, holding back a batch's detaches and closes for
// its next message.
#include <sys/prctl.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "deepwell/common/error.hpp"
#include "file_system_impl.hpp"

namespace deepwell {
namespace {

// A service thread's tree ops after the tables' lock (detaches, closes),
// sent with its next message to the tree (serve).
thread_local std::vector<tree_call>* deferred_ops = nullptr;
thread_local tree_session* deferred_tree = nullptr;

}  // namespace

// Runs calls[0..n) on the tree, in messages of at most tree_batch_max ops.
// False where the server went away: each call left unanswered gets EIO.
bool file_system::impl::run_tree(tree_session& t, tree_call* calls, size_t n) {
  size_t i = 0;
  try {
    for (; i < n; i += tree_batch_max) t.run(calls + i, uint32_t(std::min<size_t>(tree_batch_max, n - i)));
    return true;
  } catch (const error&) {
    for (; i < n; ++i) calls[i].op.err = EIO;
    return false;
  }
}

// A detach or close, whose answer nobody waits for: with the service
// thread's others where it defers them, else now.
void file_system::impl::run_or_defer(tree_session& t, tree_call c) {
  if (deferred_ops && deferred_tree == &t) {
    deferred_ops->push_back(std::move(c));
    return;
  }
  run_tree(t, &c, 1);
}

file_system::impl::tree_file::~tree_file() {
  if (!id) return;
  tree_call c;
  c.op.kind = uint32_t(tree_op_kind::close);
  c.op.file = id;
  run_or_defer(*tree, std::move(c));
}

// Sends what was deferred, in order, and stops deferring.
void file_system::impl::run_deferred(std::vector<tree_call>& ops) {
  deferred_ops = nullptr;
  deferred_tree = nullptr;
  run_tree(*tree, ops.data(), ops.size());
  ops.clear();
}

// One call, answered (EIO where the server went away); a readdir's entry
// name into `name`.
tree_op file_system::impl::ask(tree_call c, std::string* name) {
  run_tree(*tree, &c, 1);
  if (name) *name = std::move(c.name);
  return c.op;
}

// Service thread k of n answers slots k, k + n, k + 2n, ...
// Requests a service thread answers together: the opens' system calls
// first, then every request's table work under one hold of the lock,
// then what comes after the lock, then the replies. Under load a thread
// finds several of its slots waiting, and the lock changes hands once
// for them all.
void file_system::impl::run(uint32_t k, uint32_t n) {
  // A 20 us sleep is one of 20 us, not of 70 (the default slack of 50 us).
  prctl(PR_SET_TIMERSLACK, 1000UL);
  auto b = std::make_unique<batch>();
  uint32_t next = k;
  uint64_t idle_since = 0;
  struct flush_at_exit {
    impl& fs;
    batch& b;
    ~flush_at_exit() { fs.run_deferred(b.deferred); }
  } at_exit{*this, *b};
  while (!stopping.load(std::memory_order_relaxed)) {
    b->n = 0;
    const uint64_t pass0 = now_ns();  // also the idle clock below
    // From where the last batch stopped, so that no slot waits behind
    // a busy run of lower ones.
    const uint32_t mine = (opts.slots - k + n - 1) / n;
    for (uint32_t seen = 0; seen < mine && b->n < max_batch; ++seen) {
      const uint32_t i = next;
      next = next + n < opts.slots ? next + n : k;
      const uint32_t t = shared_load_acquire(&slots[i].ticket);
      if (t == served[i]) continue;
      b->slot[b->n] = i;
      b->ticket[b->n++] = t;
    }
    if (b->n) {
      idle_since = 0;
      b->seen_ns = now_ns();
      b->pass_ns = b->seen_ns - pass0;
      serve(*b);
      continue;
    }
    // Nothing waiting: what the last batches left for the tree goes now.
    if (!b->deferred.empty()) run_deferred(b->deferred);
    // Nothing to do: spin a while (a kernel's next request usually comes
    // within microseconds of the last reply), then sleep in short steps,
    // longer ones once idle for long. Counted in passes, a spin of 512
    // pauses had the threads asleep a quarter of a grep's search while
    // warps waited milliseconds for their replies.
    if (!idle_since) idle_since = pass0;
    if (pass0 - idle_since < idle_spin_ns())
      spin_pause();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(pass0 - idle_since < 100'000'000 ? 20 : 200));
  }
}

// Where cores are few (CI's two), a spinning service takes them from
// the clients it waits for.
uint64_t file_system::impl::idle_spin_ns() {
  static const uint64_t ns = std::thread::hardware_concurrency() >= 8 ? 200'000 : 10'000;
  return ns;
}

uint64_t file_system::impl::thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return uint64_t(ts.tv_sec) * 1000000000 + uint64_t(ts.tv_nsec);
}

void file_system::impl::serve(batch& b) {
  const bool profile = opts.profile_service;
  const uint64_t t0 = now_ns(), c0 = profile ? thread_cpu_ns() : 0;
  rusage r0{}, r1{};
  if (profile) getrusage(RUSAGE_THREAD, &r0);
  for (uint32_t j = 0; j < b.n; ++j) {
    gfs_slot& q = slots[b.slot[j]];
    q.r0 = q.r1 = q.r2 = q.r3 = 0;
    b.prep[j] = open_prep{};
    b.later[j] = after_lock{};
  }
  prepare_opens(b);
  uint32_t errors = 0;
  uint64_t locked_open = 0, locked_close = 0;  // profile: under the lock, in opens and in the rest
  const uint64_t t1 = now_ns(), c1 = profile ? thread_cpu_ns() : 0;
  if (profile) getrusage(RUSAGE_THREAD, &r1);
  uint64_t t2, t3;
  {
    std::unique_lock<std::mutex> lock(state, std::defer_lock);
    lock_state(lock);
    t2 = now_ns();
    for (uint32_t j = 0; j < b.n; ++j) {
      gfs_slot& q = slots[b.slot[j]];
      after_lock& later = b.later[j];
      int err = 0;
      const uint64_t r0 = profile ? now_ns() : 0;
      switch (gfs_op(q.op)) {
        case gfs_op::open: err = commit_open(q, b.prep[j], later); break;
        case gfs_op::close: err = do_close(q, later); break;
        case gfs_op::truncate: err = do_truncate(q); break;
        case gfs_op::sync_size: err = do_sync_size(q); break;
        case gfs_op::opendir: err = do_opendir(q, later); break;
        case gfs_op::readdir: err = do_readdir(q); break;
        case gfs_op::closedir: err = do_closedir(q, later); break;
        default: err = EINVAL;
      }
      if (profile) (gfs_op(q.op) == gfs_op::open ? locked_open : locked_close) += now_ns() - r0;
      q.err = err;
      errors += err != 0;
    }
    t3 = now_ns();
  }
  // Before the replies: a freed entry is free when its caller hears of
  // it. The tree ops this leaves (closed files' detaches and closes) wait
  // for the thread's next message to the tree (its next opens) or its
  // first idle pass: a reopen meanwhile attaches its own file, which a
  // detach of the old one (only while that one is attached) leaves alone.
  deferred_ops = &b.deferred;
  deferred_tree = tree.get();
  for (uint32_t j = 0; j < b.n; ++j) finish(b.later[j]);
  deferred_ops = nullptr;
  deferred_tree = nullptr;
  if (b.deferred.size() >= tree_batch_max) run_deferred(b.deferred);
  // The requests' counts before their replies: a caller that reads stats()
  // after its call returned sees the call counted.
  {
    std::lock_guard<std::mutex> stats_lock(stats_mutex);
    for (uint32_t j = 0; j < b.n; ++j) add(b.later[j].n);
    st.requests += b.n;
    st.errors += errors;
  }
  uint32_t replied = 0;
  for (uint32_t j = 0; j < b.n; ++j) {
    if (!b.later[j].deferred) {
      shared_store_release(&slots[b.slot[j]].done, b.ticket[j]);
      ++replied;
    }
    served[b.slot[j]] = b.ticket[j];
  }
  const uint64_t t_replied = now_ns();
  std::lock_guard<std::mutex> stats_lock(stats_mutex);
  st.seen_to_reply_ns += replied * (t_replied - b.seen_ns);
  ++st.passes;
  st.pass_ns += b.pass_ns;
  const uint64_t t4 = now_ns();
  st.service_ns += t4 - t0;
  st.open_calls_ns += t1 - t0;
  st.open_calls_cpu_ns += c1 - c0;
  st.open_calls_sleeps += uint64_t(r1.ru_nvcsw - r0.ru_nvcsw);
  st.open_calls_preempted += uint64_t(r1.ru_nivcsw - r0.ru_nivcsw);
  st.open_calls_faults += uint64_t(r1.ru_minflt - r0.ru_minflt + r1.ru_majflt - r0.ru_majflt);
  for (uint32_t j = 0; j < b.n; ++j) st.syscalls_ns += b.prep[j].syscall_ns;
  st.locked_ns += t3 - t2;
  st.locked_opens_ns += locked_open;
  st.locked_others_ns += locked_close;
  st.after_lock_ns += t4 - t3;
}

}  // namespace deepwell
