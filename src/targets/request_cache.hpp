// Per-request records for targets that complete asynchronously. Each thread
// keeps its own cache of free records, so several poller threads (each with
// its own engine) share one target without a lock and, once warm, without
// allocating. A record may be given back on another thread than the one
// that took it; it then joins that thread's cache.
#pragma once

namespace deepwell::detail {

// Record must have a `Record* next` member.
template <class Record>
class request_cache {
 public:
  static Record* take() {
    if (!thread_gone) {
      free_list& l = local();
      if (Record* r = l.head) {
        l.head = r->next;
        --l.count;
        r->next = nullptr;
        return r;
      }
    }
    return new Record();
  }

  static void give(Record* r) {
    if (thread_gone) {  // this thread's cache is already destroyed
      delete r;
      return;
    }
    free_list& l = local();
    if (l.count >= max_cached) {
      delete r;
      return;
    }
    r->next = l.head;
    l.head = r;
    ++l.count;
  }

 private:
  // Enough for the requests one poller keeps in flight; beyond it, records
  // go back to the heap so a burst does not pin memory forever.
  static constexpr unsigned max_cached = 4096;

  struct free_list {
    Record* head = nullptr;
    unsigned count = 0;
    ~free_list() {
      thread_gone = true;
      while (Record* r = head) {
        head = r->next;
        delete r;
      }
    }
  };

  static free_list& local() {
    thread_local free_list list;
    return list;
  }

  // Trivially destructible, so still readable while (and after) the
  // thread's other thread_local objects are destroyed.
  static inline thread_local bool thread_gone = false;
};

}  // namespace deepwell::detail
