// ticker (ticker.hpp).
#include "ticker.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace deepwell::tools {

namespace {
using clk = std::chrono::steady_clock;
constexpr auto quiet_for = std::chrono::seconds(2);
constexpr auto tty_every = std::chrono::milliseconds(500);
constexpr auto log_every_max = std::chrono::seconds(30);
}  // namespace

ticker::ticker(std::string label, std::function<std::string()> status, bool enabled)
    : label_(std::move(label)), status_(std::move(status)), tty_(isatty(STDERR_FILENO) != 0) {
  if (enabled) thread_ = std::thread([this] { loop(); });
}

ticker::~ticker() { stop(); }

void ticker::loop() {
  const auto t0 = clk::now();
  auto next = t0 + quiet_for;
  auto log_gap = std::chrono::duration_cast<clk::duration>(quiet_for);
  std::unique_lock<std::mutex> l(m_);
  for (;;) {
    if (cv_.wait_until(l, next, [this] { return stopping_; })) break;
    const double s = std::chrono::duration<double>(clk::now() - t0).count();
    const std::string st = status_ ? status_() : std::string();
    if (tty_) {
      std::fprintf(stderr, "\r%s: %.0f s%s%s\033[K", label_.c_str(), s, st.empty() ? "" : ", ", st.c_str());
      next += tty_every;
    } else {
      std::fprintf(stderr, "%s: %.0f s%s%s\n", label_.c_str(), s, st.empty() ? "" : ", ", st.c_str());
      log_gap = std::min<clk::duration>(log_gap * 2, log_every_max);
      next = clk::now() + log_gap;
    }
    std::fflush(stderr);
    printed_ = true;
  }
  if (printed_) {
    const double s = std::chrono::duration<double>(clk::now() - t0).count();
    std::fprintf(stderr, "%s%s done in %.1f s%s\n", tty_ ? "\r" : "", label_.c_str(), s, tty_ ? "\033[K" : "");
    std::fflush(stderr);
  }
}

void ticker::stop() {
  {
    std::lock_guard<std::mutex> l(m_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace deepwell::tools
