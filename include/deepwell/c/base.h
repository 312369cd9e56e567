/* deepwell's C ABI, what every part shares: the conventions below, the ABI
 * version, the error codes, the cache options, the last error, sizes as
 * text, CUDA devices and server mode. The parts (deepwell.h includes them
 * all): array.h (a dataset of fixed-size rows opened through a page cache,
 * on a GPU or, for CPU clients, in host memory, gathered and scattered by
 * index arrays), checkpoint.h, kv.h, vectors.h, checksums.h. Built as
 * libdeepwell_c.so (CMake target deepwell_c); the Python package loads it
 * with ctypes; any language with a C FFI can.
 *
 * Conventions: functions return 0 on success and a negative dw_errc on
 * failure; dw_last_error() then holds a message naming the problem (per
 * thread). Pointers passed in are borrowed for the call. GPU work runs on the
 * stream given (a cudaStream_t as an integer; 0 is the legacy default
 * stream) and is asynchronous: dw_array_check() waits for the stream and reports
 * what went wrong since the last check. Handles may be used from several
 * threads at once; dw_array_close() must not race with other calls on the handle.
 *
 * Options structures say their own size in their first field, `size`, which
 * their dw_*_options_init sets: a library reads only the bytes the caller
 * has, and refuses (DW_EINVAL) a size it cannot take or fields it does not
 * know that are set (a deepwell.h newer than the library). Always start
 * from dw_*_options_init. One reference page per function: docs/c/.
 */
#ifndef DEEPWELL_C_BASE_H
#define DEEPWELL_C_BASE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DEEPWELL_C_BUILD)
#define DW_API __attribute__((visibility("default")))
#else
#define DW_API
#endif

#define DW_ABI_VERSION 7

enum dw_errc {
  DW_OK = 0,
  DW_EINVAL = -1,    /* a bad argument (sizes, dtypes, pointers in the wrong memory) */
  DW_EIO = -2,       /* a file that cannot be opened, read or written; an NVMe error status */
  DW_ERANGE = -3,    /* an index out of range */
  DW_ENOCUDA = -4,   /* no CUDA driver or device, or a build without CUDA */
  DW_ERUNTIME = -5,  /* anything else: timeouts, a lost controller, CUDA errors */
};

/* The page cache and its controller, the same fields wherever a cache is
 * made (arrays, checkpoint stores, KV stores) and the same names as C++'s
 * deepwell::cache_options (deepwell/cache/cache_options.hpp) and Python's keyword
 * arguments. Each dw_*_options_init fills them with that entry point's
 * defaults (include/deepwell/common/defaults.hpp: DEEPWELL_* in the environment,
 * else built in); 0 in a numeric field also means the default. */
typedef struct dw_cache_options {
  int32_t device;         /* CUDA ordinal: a page cache on that GPU; -1: a host cache and CPU threads */
  uint32_t page_size;     /* cache page: 512 B to 64 KiB, a power of two */
  uint64_t cache_bytes;   /* page data of the cache */
  uint32_t queue_pairs;   /* the cache's queue pairs */
  uint32_t queue_entries; /* per queue pair, a power of two (staging: pairs x entries x page) */
  uint32_t pollers;       /* controller threads (in-process datasets) */
  uint32_t cpu_threads;   /* a host cache's client threads; 0: the cores, at most 16 */
  int32_t odirect;        /* O_DIRECT: bypass the page cache (and no mapping of the file) */
  int32_t direct_files;   /* read-only files in the page cache read from a mapping, with no command:
                             0 never, 1 when fully resident at open (default), 2 always */
  double timeout_s;       /* deadline of every wait inside an access */
} dw_cache_options;

DW_API int dw_abi_version(void);

/* The bytes a size written as text says ("4096", "512K", "64MiB", "1.5GiB",
 * "1TiB": powers of 1024, any case), by the one rule of the command line,
 * the environment and the server's TOML (include/deepwell/common/size_text.hpp).
 * DW_EINVAL naming the text when it is not a size. */
DW_API int dw_parse_size(const char* text, uint64_t* bytes);
/* Checks every DEEPWELL_* setting of the environment (docs/settings.md):
 * DW_EINVAL naming the first bad one, whichever call would have read it. */
DW_API int dw_check_settings(void);
DW_API const char* dw_last_error(void);
/* Number of CUDA devices; DW_ENOCUDA (with the reason) when there is no driver. */
DW_API int dw_cuda_device_count(int32_t* count);

/* Server mode (docs/server.md): while a server is named, dw_array_open's path
 * names a dataset that server offers (its name, or its file's path), which
 * it serves under this process's grants. dw_set_server(socket) names one
 * for this process; NULL goes back to DEEPWELL_SERVER (unset: embedded). */
DW_API int dw_set_server(const char* socket);
/* The named server's statistics as JSON text, into buf (bytes long,
 * truncated, NUL-terminated); *needed (if not NULL) gets the full length + 1. */
DW_API int dw_server_stats(char* buf, uint64_t bytes, uint64_t* needed);

#ifdef __cplusplus
}
#endif

#endif /* DEEPWELL_C_BASE_H */
