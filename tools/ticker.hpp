// Progress of a long step on stderr, for steps whose length the tool cannot
// know in advance (an algorithm's iterations on CPU threads, the CPU
// reference, a table being written). graph::progress (csr_file.hpp) draws
// a bar where the total is known; this says what is known: the time so far
// and a status the caller counts.
//
// Quiet for the first 2 s (short runs print nothing). Then on a terminal
// one line rewritten twice a second, as graph::progress does; in a log a
// line at 2 s, then at gaps doubling from 4 s up to 30 s, so a long run
// never floods the log. When it has printed, it ends with "LABEL done in X s".
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace deepwell::tools {

class ticker {
 public:
  // status: called on the ticker's thread (read atomics only), "" for none.
  explicit ticker(std::string label, std::function<std::string()> status = {}, bool enabled = true);
  ~ticker();
  ticker(const ticker&) = delete;
  ticker& operator=(const ticker&) = delete;
  // Stops the ticking; prints "LABEL done in X s" if it printed anything.
  void stop();

 private:
  void loop();
  std::string label_;
  std::function<std::string()> status_;
  bool tty_ = false;
  bool printed_ = false;
  bool stopping_ = false;
  std::mutex m_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace deepwell::tools
