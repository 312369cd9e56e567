// require_gpu and the remembered command line (gpu_probe.hpp): the one
// message every GPU-default command gives on a machine without a usable GPU.
#include "deepwell/common/error.hpp"
#include "gpu_probe.hpp"

namespace deepwell::tools {

namespace {
std::string typed = "deepwell";
}

void remember_command_line(int argc, char** argv) {
  typed = "deepwell";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    // Quoted where a shell would split it, so the line can be pasted.
    typed += " " + (a.find_first_of(" \t'\"$") == std::string::npos && !a.empty() ? a : "'" + a + "'");
  }
}

const std::string& command_line() { return typed; }

namespace {
[[noreturn]] void throw_no_gpu(const std::string& why, const std::string& command, const std::string& cpu_flag) {
  throw error("no usable CUDA GPU was found (" + why + "): `" + (command.empty() ? typed : command) +
              (cpu_flag.empty() ? "" : " " + cpu_flag) + "` runs the same on CPU threads");
}
}  // namespace

void require_gpu(const std::string& command, const std::string& cpu_flag) {
  const std::string why = no_gpu_reason();
  if (!why.empty()) throw_no_gpu(why, command, cpu_flag);
}

void gpu_warmup::require(const std::string& command, const std::string& cpu_flag) {
  const std::string why = probe_result_.get();
  if (!why.empty()) throw_no_gpu(why, command, cpu_flag);
}

double gpu_warmup::context_seconds() { return made_result_.get(); }

double gpu_warmup::probe_seconds() {
  probe_result_.wait();
  return probe_seconds_;
}

gpu_warmup::~gpu_warmup() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace deepwell::tools
