// fork_join.hpp. A batch's state lives on its caller's stack, which
// returns only once no helper holds it.
#include "common/fork_join.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace deepwell::detail {

struct fork_join::impl {
  struct batch {
    const std::function<void(uint32_t)>* fn;
    uint32_t total;
    std::atomic<uint32_t> next{0}, finished{0};
    uint32_t active = 0;  // helpers inside take(), under m
  };
  std::mutex batch_mutex, m;
  std::condition_variable cv, done;
  batch* current = nullptr;
  uint64_t seq = 0;
  bool stop = false;
  std::vector<std::thread> threads;

  void take(batch& b) {
    for (uint32_t i; (i = b.next.fetch_add(1)) < b.total;) {
      (*b.fn)(i);
      if (b.finished.fetch_add(1) + 1 == b.total) {
        std::lock_guard<std::mutex> l(m);
        done.notify_all();
      }
    }
  }
  void work() {
    uint64_t seen = 0;
    for (;;) {
      batch* b;
      {
        std::unique_lock<std::mutex> l(m);
        cv.wait(l, [&] { return stop || (current && seq != seen); });
        if (stop) return;
        seen = seq;
        b = current;
        ++b->active;
      }
      take(*b);
      std::lock_guard<std::mutex> l(m);
      if (--b->active == 0) done.notify_all();
    }
  }
};

fork_join::fork_join(unsigned helpers) : impl_(std::make_unique<impl>()) {
  for (unsigned k = 0; k < helpers; ++k) impl_->threads.emplace_back([this] { impl_->work(); });
}

fork_join::~fork_join() {
  {
    std::lock_guard<std::mutex> l(impl_->m);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  for (std::thread& t : impl_->threads) t.join();
}

unsigned fork_join::helpers() const { return unsigned(impl_->threads.size()); }

unsigned fork_join::default_helpers() { return std::clamp(std::thread::hardware_concurrency() / 2, 2u, 8u) - 1; }

void fork_join::run(uint32_t n, const std::function<void(uint32_t)>& fn) {
  impl& s = *impl_;
  std::unique_lock<std::mutex> one(s.batch_mutex, std::try_to_lock);
  if (!one.owns_lock() || s.threads.empty() || n < 2) {
    for (uint32_t i = 0; i < n; ++i) fn(i);
    return;
  }
  impl::batch b{&fn, n};
  {
    std::lock_guard<std::mutex> l(s.m);
    s.current = &b;
    ++s.seq;
  }
  s.cv.notify_all();
  s.take(b);
  std::unique_lock<std::mutex> l(s.m);
  s.done.wait(l, [&] { return b.finished.load() == n && b.active == 0; });
  s.current = nullptr;
}

}  // namespace deepwell::detail
