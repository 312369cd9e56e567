// Compiler portability macros shared by host (g++) and device (nvcc) code.
#pragma once

#if defined(__CUDACC__)
#define DW_HD __host__ __device__
#define DW_DEVICE __device__
#else
#define DW_HD
#define DW_DEVICE
#endif

// True while compiling the device side of a .cu file.
#if defined(__CUDA_ARCH__)
#define DW_DEVICE_CODE 1
#else
#define DW_DEVICE_CODE 0
#endif

#define DW_FORCEINLINE inline __attribute__((always_inline))
// Kept out of line: code that is rarely run and needs many registers (a
// kernel capped with __launch_bounds__ spills there, not in its hot path).
#define DW_NOINLINE __attribute__((noinline))

// Loop unrolling hint understood by nvcc; nothing for the host compiler.
#if defined(__CUDACC__)
#define DW_UNROLL _Pragma("unroll")
#else
#define DW_UNROLL
#endif
