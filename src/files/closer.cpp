// The file API's closer thread (file_system_impl.hpp): gclose's and
// gclose_async's closes of written files, each finished (the file's size
// set, the user's reference dropped, a gclose answered) once its window's
// target has completed the write-backs the client had submitted, or at
// its deadline.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "file_system_impl.hpp"

namespace deepwell {

// The closer thread: finishes gclose_async's closes as their writes land.
void file_system::impl::close_in_background() {
  std::unique_lock<std::mutex> lock(pending_mutex);
  for (uint32_t idle = 0;;) {
    if (pending.empty()) {
      if (closer_stop) return;
      pending_cv.wait_for(lock, std::chrono::milliseconds(50));
      continue;
    }
    // The windows' counts, asked outside the lock (under a server, a
    // message): only this thread takes entries out of `pending`, so its
    // first `asked` entries are still there when it looks again.
    const size_t asked = pending.size();
    std::vector<uint32_t> windows(asked);
    for (size_t i = 0; i < asked; ++i) windows[i] = pending[i].window;
    lock.unlock();
    std::vector<uint32_t> done = writes_done(windows);
    lock.lock();
    std::vector<pending_close> ready;
    const uint64_t now = now_ns();
    for (size_t i = asked; i-- > 0;) {
      const pending_close& p = pending[i];
      if (int32_t(done[i] - p.started) >= 0 || now >= p.deadline_ns) {
        ready.push_back(p);
        pending.erase(pending.begin() + std::ptrdiff_t(i));
      }
    }
    if (ready.empty()) {
      // Writes in flight: a page's write takes tens of microseconds or more.
      lock.unlock();
      if (++idle < 64)
        spin_pause();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      lock.lock();
      continue;
    }
    idle = 0;
    lock.unlock();
    // In parallel (up to 8 threads): each close's fstat and truncate.
    const size_t n = ready.size(), workers = std::min<size_t>(8, n);
    if (workers <= 1) {
      finish_close(ready[0]);
    } else {
      std::vector<std::thread> pool;
      for (size_t k = 0; k < workers; ++k)
        pool.emplace_back([&, k] {
          for (size_t i = k; i < n; i += workers) finish_close(ready[i]);
        });
      for (std::thread& t : pool) t.join();
    }
    lock.lock();
    pending_cv.notify_all();  // sync() waits for pending to empty
  }
}

// Each window's writes_done (0 where the server went away: its closes
// then end at their deadline).
std::vector<uint32_t> file_system::impl::writes_done(const std::vector<uint32_t>& windows) {
  std::vector<tree_call> calls;
  calls.reserve(windows.size());
  for (uint32_t w : windows) calls.push_back(call_of(tree_op_kind::writes_done, 0, w));
  run_tree(*tree, calls.data(), calls.size());
  std::vector<uint32_t> out(windows.size());
  for (size_t i = 0; i < windows.size(); ++i) out[i] = calls[i].op.value;
  return out;
}

void file_system::impl::finish_close(const pending_close& p) {
  std::shared_ptr<tree_file> file;
  {
    std::lock_guard<std::mutex> tables(state);
    file = table[p.h]->file;  // the close's reference keeps the entry
  }
  int err = 0;
  std::string what;
  if (int32_t(writes_done({p.window})[0] - p.started) < 0) {
    err = ETIMEDOUT;
    what = "its pages' write-backs did not all complete before the deadline";
  } else if (const int e = int(file_op(tree_op_kind::write_error, *file).value)) {
    err = e;
    what = "a write-back failed";
  } else if (const int e = set_size(*file, p.size, false)) {
    err = e;
    what = "setting its size";
  }
  after_lock later;
  {
    std::lock_guard<std::mutex> tables(state);
    --table[p.h]->closing;
    drop_user(p.h, *table[p.h], nullptr, later);
  }
  finish(later);
  // The error and the counts first, then the close counts as finished
  // (sync() waits for closes_pending to reach 0, then reads the error),
  // then the reply: whoever learns the close is done sees all of it.
  if (err && p.reply < 0) {
    std::lock_guard<std::mutex> lock(pending_mutex);
    if (background_error.empty())
      background_error = "the background close of " + file->path + " failed: " + what + ": " + std::strerror(err);
  }
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    add(later.n);
    --st.closes_pending;
    if (p.reply < 0) {
      ++st.background_closes;
      if (err) ++st.background_close_errors;
    }
  }
  if (p.reply >= 0) {  // a gclose: its warp hears of the error itself
    gfs_slot& q = slots[p.reply];
    q.err = err;
    q.r0 = 0;  // the host clears the entry's tag (finish, above)
    shared_store_release(&q.done, p.ticket);
  }
}

}  // namespace deepwell
