// "Is there a GPU this process can use?", asked once before a command that
// defaults to the GPU starts: without one, CUDA's first call fails deep in
// the run (cudaGetDevice: cudaErrorInsufficientDriver) and the user sees a
// stack of errors and no way out. Asked up front, the answer is one line
// that names the CUDA reason and the --cpu that runs the same on CPU threads.
#pragma once
#include <string>

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

// The command line as typed (main keeps it), for messages that show the
// command to run instead: "deepwell graph bfs g.dwg".
void remember_command_line(int argc, char** argv);
const std::string& command_line();

// What GPU support this binary has: "CUDA 12.8 runtime" or "without CUDA:
// CPU threads only" (deepwell --version).
std::string cuda_build_info();

}  // namespace deepwell::tools
