// "Is there a GPU this process can use?", asked once before a command that
// defaults to the GPU starts: without one, CUDA's first call fails deep in
// the run (cudaGetDevice: cudaErrorInsufficientDriver) and the user sees a
// stack of errors and no way out. Asked up front, the answer is one line
// that names the CUDA reason and the --cpu that runs the same on CPU threads.
#pragma once
#include <future>
#include <string>
#include <thread>

namespace deepwell::tools {

// "" when a CUDA device is usable; else why not ("cudaGetDeviceCount:
// cudaErrorInsufficientDriver: CUDA driver version is insufficient ...",
// "no CUDA device", "this deepwell was built without CUDA").
// gpu_probe.cu, or gpu_probe_nogpu.cpp in a build without CUDA.
std::string no_gpu_reason();

// Throws deepwell::error "no usable CUDA GPU was found (REASON): `COMMAND
// --cpu` runs the same on CPU threads" unless no_gpu_reason() is "".
// `command`: what the user typed (default: command_line()); `cpu_flag`:
// the option that avoids the GPU.
void require_gpu(const std::string& command = "", const std::string& cpu_flag = "--cpu");

// Starts the GPU on a thread of its own, so that a short command loads its
// inputs meanwhile: the driver's start and the context's creation are a
// large share of such a command's time on a large GPU. `spin`: the context
// spins while it waits for kernels (cudaDeviceScheduleSpin), else it blocks
// (cudaDeviceScheduleBlockingSync), set before the context exists. Calls to
// CUDA elsewhere wait for context_seconds() first.
class gpu_warmup {
 public:
  explicit gpu_warmup(bool spin = false);
  ~gpu_warmup();
  gpu_warmup(const gpu_warmup&) = delete;
  gpu_warmup& operator=(const gpu_warmup&) = delete;
  // require_gpu's check and message, from the warm-up's probe (waits for
  // the probe only, not for the context).
  void require(const std::string& command = "", const std::string& cpu_flag = "--cpu");
  // Waits for the context; the seconds from the start to the context made
  // (where making it failed, the command's first CUDA call says why).
  double context_seconds();
  // Waits for the probe; the seconds it took (the driver's start).
  double probe_seconds();

 private:
  double probe_seconds_ = 0;  // written before probe_ is set
  std::promise<std::string> probe_;
  std::shared_future<std::string> probe_result_ = probe_.get_future().share();
  std::promise<double> made_;
  std::shared_future<double> made_result_ = made_.get_future().share();
  std::thread thread_;
};

// The command line as typed (main keeps it), for messages that show the
// command to run instead: "deepwell graph bfs g.dwg".
void remember_command_line(int argc, char** argv);
const std::string& command_line();

// What GPU support this binary has: "CUDA 12.8 runtime" or "without CUDA:
// CPU threads only" (deepwell --version).
std::string cuda_build_info();

}  // namespace deepwell::tools
