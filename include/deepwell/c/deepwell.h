/* deepwell's C ABI: a dataset of fixed-size rows opened through a page cache
 * (on a GPU or, for CPU clients, in host memory), gathered and scattered by
 * index arrays. The Python package loads it with ctypes; any language with a
 * C FFI can. Built as libdeepwell_c.so (CMake target deepwell_c).
 *
 * Conventions: functions return 0 on success and a negative dw_errc on
 * failure; dw_last_error() then holds a message naming the problem (per
 * thread). Pointers passed in are borrowed for the call. GPU work runs on the
 * stream given (a cudaStream_t as an integer; 0 is the legacy default
 * stream) and is asynchronous: dw_check() waits for the stream and reports
 * what went wrong since the last check. Handles may be used from several
 * threads at once; dw_close() must not race with other calls on the handle.
 */
#ifndef DEEPWELL_C_DEEPWELL_H
#define DEEPWELL_C_DEEPWELL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DEEPWELL_C_BUILD)
#define DW_API __attribute__((visibility("default")))
#else
#define DW_API
#endif

#define DW_ABI_VERSION 2

enum dw_errc {
  DW_OK = 0,
  DW_EINVAL = -1,    /* a bad argument (sizes, dtypes, pointers in the wrong memory) */
  DW_EIO = -2,       /* a file that cannot be opened, read or written; an NVMe error status */
  DW_ERANGE = -3,    /* an index out of range */
  DW_ENOCUDA = -4,   /* no CUDA driver or device, or a build without CUDA */
  DW_ERUNTIME = -5,  /* anything else: timeouts, a lost controller, CUDA errors */
};

typedef struct dw_array dw_array;

typedef struct dw_open_options {
  const char* path;      /* a file or block device; NULL: zeroed host memory of host_bytes */
  uint64_t host_bytes;   /* with path == NULL */
  uint64_t offset;       /* the dataset starts here inside the file */
  uint64_t length;       /* dataset bytes; 0: to the end of the file */
  uint32_t row_bytes;    /* bytes per row; the dataset must hold a whole number of rows */
  uint32_t page_size;    /* cache page: 512 B to 64 KiB, a power of two; 0: the default */
  uint64_t cache_bytes;  /* page data of the cache; 0: the default */
  int32_t device;        /* CUDA device ordinal, or -1 for CPU clients (a host cache) */
  int32_t writable;      /* open for writing (scatter, flush) */
  int32_t create;        /* with writable: create the file (create_bytes long) if missing */
  uint64_t create_bytes;
  int32_t odirect;       /* O_DIRECT: bypass the page cache */
  int32_t direct_files;  /* read-only files in the page cache read by GPU warps directly:
                            0 never, 1 when fully resident at open (default), 2 always */
  uint32_t pollers;      /* controller threads; 0: the default */
  uint32_t cpu_threads;  /* threads of a CPU client's gather; 0: cores, at most 16 */
  uint32_t queue_pairs;  /* 0: the cache's default */
  double timeout_s;      /* per access; 0: the default */
  int32_t cache_reads;   /* 1 (default): gathers go through the cache; 0: where the dataset has a
                            direct tier, gathers read rows there in place without caching them
                            (read-only datasets; writable ones in host memory, whose scatters
                            then write in place too; writable files read through the cache) */
} dw_open_options;

typedef struct dw_array_info {
  uint64_t rows;
  uint32_t row_bytes;
  uint32_t page_size;
  uint64_t cache_bytes;
  uint32_t cache_pages;
  int32_t device;
  int32_t writable;
  int32_t direct_tier; /* reads skip the controller (host memory, or a resident file) */
  int32_t in_place;    /* gathers read the direct tier in place (cache_reads = 0 and a direct tier; see cache_reads) */
  char backend[16];    /* the controller's I/O backend: "io_uring" or "threads" */
} dw_array_info;

typedef struct dw_stats {
  uint64_t accesses, hits, misses, evictions, writebacks;
  uint64_t bytes_read, bytes_written, direct_fills;
  uint64_t controller_reads, controller_bytes_read, controller_writes, controller_bytes_written;
  double controller_cpu_seconds; /* CPU time of the controller's poller threads */
} dw_stats;

DW_API int dw_abi_version(void);
DW_API const char* dw_last_error(void);
/* Number of CUDA devices; DW_ENOCUDA (with the reason) when there is no driver. */
DW_API int dw_cuda_device_count(int32_t* count);

/* Fills o with the library's defaults (DEEPWELL_* in the environment, else
 * the built-in ones: docs/settings.md; device 0, read-only). */
DW_API void dw_open_options_init(dw_open_options* o);
/* Opens a dataset as rows. Handles opened on the same file (offset, length)
 * with the same device and cache options share one controller, namespace
 * and cache: a scatter through one is seen by a gather through another. */
DW_API int dw_open(const dw_open_options* o, dw_array** out);
/* Waits for the device, flushes dirty pages, frees everything. NULL is ignored. */
DW_API int dw_close(dw_array* a);
DW_API int dw_info(const dw_array* a, dw_array_info* info);

/* Rows idx[0 .. n) into out (n * row_bytes bytes). idx_bits: 32 or 64
 * (signed). GPU arrays: out is device memory of the array's device; idx is
 * device memory, or host memory with idx_on_host (copied on the stream).
 * CPU arrays: both in host memory (stream ignored, returns when done). */
DW_API int dw_gather(dw_array* a, const void* idx, int32_t idx_bits, int32_t idx_on_host, uint64_t n, void* out,
                     uintptr_t stream);
/* src rows [0 .. n) into rows idx[0 .. n); the pages become dirty. */
DW_API int dw_scatter(dw_array* a, const void* idx, int32_t idx_bits, int32_t idx_on_host, uint64_t n,
                      const void* src, uintptr_t stream);
/* Waits for the stream, then reports (and forgets) the first problem of the
 * gathers and scatters before: an index out of range (DW_ERANGE), an I/O
 * error (DW_EIO), a timeout or CUDA error (DW_ERUNTIME). */
DW_API int dw_check(dw_array* a, uintptr_t stream);
/* Waits for the device, writes every dirty page back and flushes the file. */
DW_API int dw_flush(dw_array* a);
/* Flushes, then empties the cache (cold runs). */
DW_API int dw_clear(dw_array* a);
DW_API int dw_stats_get(dw_array* a, dw_stats* s);
DW_API int dw_stats_reset(dw_array* a);

/* The same rows without deepwell, to compare against: rows[0 .. n) of
 * row_bytes each, read from the file at `offset` with plain io_uring by CPU
 * threads (threads rings, depth reads in flight each; no controller, no
 * cache), into out (host memory, n * row_bytes; NULL: a scratch buffer).
 * Reports the wall time in *seconds. Python: deepwell.baselines. */
DW_API int dw_uring_read_rows(const char* path, int32_t odirect, uint64_t offset, uint32_t row_bytes,
                              const int64_t* rows, uint64_t n, uint32_t depth, uint32_t threads, void* out,
                              double* seconds);

#ifdef __cplusplus
}
#endif

#endif /* DEEPWELL_C_DEEPWELL_H */
