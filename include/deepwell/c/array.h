/* deepwell's C ABI: arrays, a dataset of fixed-size rows opened through a page
 * cache and gathered and scattered by index arrays; the io_uring row-read baseline. */
#ifndef DEEPWELL_C_ARRAY_H
#define DEEPWELL_C_ARRAY_H

#include "deepwell/c/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dw_array dw_array;

typedef struct dw_array_options {
  uint32_t size;         /* sizeof(dw_array_options) as the caller was built: dw_array_options_init sets it */
  const char* path;      /* a file or block device; NULL: zeroed host memory of host_bytes */
  uint64_t host_bytes;   /* with path == NULL */
  uint64_t offset;       /* the dataset starts here inside the file */
  uint64_t length;       /* dataset bytes; 0: to the end of the file */
  uint32_t row_bytes;    /* bytes per row; the dataset must hold a whole number of rows */
  int32_t writable;      /* open for writing (scatter, flush) */
  int32_t create;        /* with writable: create the file (create_bytes long) if missing */
  int32_t cache_reads;   /* 1 (default): gathers go through the cache; 0: where the dataset has a
                            direct tier, gathers read rows there in place without caching them
                            (read-only datasets; writable ones in host memory, whose scatters
                            then write in place too; writable files read through the cache) */
  uint64_t create_bytes;
  dw_cache_options cache;
  /* An array of drives as one dataset (path NULL): members[0 .. member_count)
   * name its files or block devices, alike in size, striped or mirrored as
   * layout says (include/deepwell/targets/drive_array.hpp). With create,
   * missing members are made, each as long as the layout needs for
   * create_bytes. offset does not apply; length limits the dataset. */
  const char** members;
  uint32_t member_count;
  int32_t layout;        /* DW_LAYOUT_SINGLE (path), DW_LAYOUT_STRIPE or DW_LAYOUT_MIRROR (members) */
  uint64_t chunk_bytes;  /* a stripe's chunk, a power of two from 512 B to 64 MiB; 0: 64 KiB */
} dw_array_options;

enum {
  DW_LAYOUT_SINGLE = 0, /* one file, block device or host memory: path */
  DW_LAYOUT_STRIPE = 1, /* chunk_bytes of the dataset to each member in turn (RAID 0) */
  DW_LAYOUT_MIRROR = 2, /* every member holds it all: reads spread, writes to all; a failed
                           member is skipped and named in dw_array_info.route (RAID 1) */
};

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
  char backend[16];    /* the controller's I/O backend: "io_uring" or "threads" ("server" in server mode) */
  char route[256];     /* how misses are filled, in words (page_cache::route): the direct tier, a server's
                          host tier, or which controller's queues, and why a faster route was not taken;
                          for an array of drives, then its layout and members ("stripe of 2 ...",
                          "mirror of 2 (1 failed): ... [failed]"), as they are at the call */
} dw_array_info;

typedef struct dw_stats {
  uint64_t accesses, hits, misses, evictions, writebacks;
  uint64_t bytes_read, bytes_written, direct_fills;
  uint64_t controller_reads, controller_bytes_read, controller_writes, controller_bytes_written;
  double controller_cpu_seconds; /* CPU time of the controller's poller threads */
  uint64_t tier_fills;   /* pages copied from a server's host-tier arena, no command (docs/server.md) */
  uint64_t tier_retries; /* such copies the server changed meanwhile, read through the server instead */
} dw_stats;

/* Fills o with the library's defaults (DEEPWELL_* in the environment, else
 * the built-in ones: docs/settings.md; a host cache (device -1), read-only)
 * and its size. */
DW_API void dw_array_options_init(dw_array_options* o);
/* Opens a dataset as rows. Handles opened on the same file (offset, length)
 * with the same device and cache options share one controller, namespace
 * and cache: a scatter through one is seen by a gather through another. */
DW_API int dw_array_open(const dw_array_options* o, dw_array** out);
/* Waits for the device, flushes dirty pages, frees everything. NULL is ignored. */
DW_API int dw_array_close(dw_array* a);
DW_API int dw_array_info_get(const dw_array* a, dw_array_info* info);

/* Rows idx[0 .. n) into out (n * row_bytes bytes). idx_bits: 32 or 64
 * (signed). GPU arrays: out is device memory of the array's device; idx is
 * device memory, or host memory with idx_on_host (copied on the stream).
 * CPU arrays: both in host memory (stream ignored, returns when done). */
DW_API int dw_array_gather(dw_array* a, const void* idx, int32_t idx_bits, int32_t idx_on_host, uint64_t n, void* out,
                     uintptr_t stream);
/* src rows [0 .. n) into rows idx[0 .. n); the pages become dirty. */
DW_API int dw_array_scatter(dw_array* a, const void* idx, int32_t idx_bits, int32_t idx_on_host, uint64_t n,
                      const void* src, uintptr_t stream);
/* Waits for the stream, then reports (and forgets) the first problem of the
 * gathers and scatters before: an index out of range (DW_ERANGE), an I/O
 * error (DW_EIO), a timeout or CUDA error (DW_ERUNTIME). */
DW_API int dw_array_check(dw_array* a, uintptr_t stream);
/* Waits for the device, writes every dirty page back and flushes the file. */
DW_API int dw_array_flush(dw_array* a);
/* Flushes, then empties the cache (cold runs). */
DW_API int dw_array_clear(dw_array* a);
DW_API int dw_array_stats_get(dw_array* a, dw_stats* s);
DW_API int dw_array_stats_reset(dw_array* a);

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

#endif /* DEEPWELL_C_ARRAY_H */
