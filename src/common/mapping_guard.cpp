#include "mapping_guard.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace deepwell::detail {
namespace {

constexpr int max_guards = 4096;

struct guard_slot {
  std::atomic<uintptr_t> begin{0};  // 0: free (set last when taken, cleared first when given back)
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> taken{false};
  std::atomic<bool> cut{false};
};

guard_slot slots[max_guards];
struct sigaction previous {};
uintptr_t page_bytes = 4096;
std::once_flag installed;

void on_sigbus(int sig, siginfo_t* si, void* context) {
  // Only a fault (not a SIGBUS sent by kill) at an address in a guarded range.
  if (si && si->si_code > 0) {
    const uintptr_t at = uintptr_t(si->si_addr);
    for (guard_slot& s : slots) {
      const uintptr_t b = s.begin.load(std::memory_order_acquire);
      if (!b || at < b || at >= s.end.load(std::memory_order_acquire)) continue;
      // The raw system call: async-signal-safe, and not a sanitizer's interceptor.
      const long p = ::syscall(SYS_mmap, at & ~(page_bytes - 1), page_bytes, PROT_READ,
                               MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p != -1) {
        s.cut.store(true, std::memory_order_release);
        return;  // the read runs again and finds zeros
      }
      break;
    }
  }
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction) return previous.sa_sigaction(sig, si, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    return previous.sa_handler(sig);
  }
  ::signal(sig, SIG_DFL);  // the fault repeats under the default action
}

void install() {
  page_bytes = uintptr_t(::sysconf(_SC_PAGESIZE));
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, &previous);
}

}  // namespace

int guard_mapping(const void* base, uint64_t bytes) {
  if (!base || !bytes) return -1;
  std::call_once(installed, install);
  for (int i = 0; i < max_guards; ++i) {
    guard_slot& s = slots[i];
    bool no = false;
    if (!s.taken.compare_exchange_strong(no, true)) continue;
    s.cut.store(false);
    s.end.store(uintptr_t(base) + bytes, std::memory_order_release);
    s.begin.store(uintptr_t(base), std::memory_order_release);
    return i;
  }
  return -1;
}

void unguard_mapping(int slot) {
  if (slot < 0 || slot >= max_guards) return;
  slots[slot].begin.store(0, std::memory_order_release);
  slots[slot].end.store(0, std::memory_order_release);
  slots[slot].taken.store(false, std::memory_order_release);
}

bool mapping_cut(int slot) {
  return slot >= 0 && slot < max_guards && slots[slot].cut.load(std::memory_order_acquire);
}

}  // namespace deepwell::detail
