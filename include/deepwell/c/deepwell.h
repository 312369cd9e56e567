/* deepwell's C ABI: a dataset of fixed-size rows opened through a page cache
 * (on a GPU or, for CPU clients, in host memory), gathered and scattered by
 * index arrays. The Python package loads it with ctypes; any language with a
 * C FFI can. Built as libdeepwell_c.so (CMake target deepwell_c).
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

#define DW_ABI_VERSION 7

enum dw_errc {
  DW_OK = 0,
  DW_EINVAL = -1,    /* a bad argument (sizes, dtypes, pointers in the wrong memory) */
  DW_EIO = -2,       /* a file that cannot be opened, read or written; an NVMe error status */
  DW_ERANGE = -3,    /* an index out of range */
  DW_ENOCUDA = -4,   /* no CUDA driver or device, or a build without CUDA */
  DW_ERUNTIME = -5,  /* anything else: timeouts, a lost controller, CUDA errors */
};

typedef struct dw_array dw_array;

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

DW_API int dw_abi_version(void);

/* The bytes a size written as text says ("4096", "512K", "64MiB", "1.5GiB",
 * "1TiB": powers of 1024, any case), by the one rule of the command line,
 * the environment and the server's TOML (include/deepwell/common/size_text.hpp).
 * DW_EINVAL naming the text when it is not a size. */
DW_API int dw_parse_size(const char* text, uint64_t* bytes);
DW_API const char* dw_last_error(void);
/* Number of CUDA devices; DW_ENOCUDA (with the reason) when there is no driver. */
DW_API int dw_cuda_device_count(int32_t* count);

/* Fills o with the library's defaults (DEEPWELL_* in the environment, else
 * the built-in ones: docs/settings.md; a host cache (device -1), read-only)
 * and its size. */
DW_API void dw_array_options_init(dw_array_options* o);
/* Opens a dataset as rows. Handles opened on the same file (offset, length)
 * with the same device and cache options share one controller, namespace
 * and cache: a scatter through one is seen by a gather through another. */
DW_API int dw_array_open(const dw_array_options* o, dw_array** out);
/* Server mode (docs/server.md): while a server is named, dw_array_open's path
 * names a dataset that server offers (its name, or its file's path), which
 * it serves under this process's grants. dw_set_server(socket) names one
 * for this process; NULL goes back to DEEPWELL_SERVER (unset: embedded). */
DW_API int dw_set_server(const char* socket);
/* The named server's statistics as JSON text, into buf (bytes long,
 * truncated, NUL-terminated); *needed (if not NULL) gets the full length + 1. */
DW_API int dw_server_stats(char* buf, uint64_t bytes, uint64_t* needed);
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

/* Checksums of read-only files (column files and .dwg graphs, format
 * version 2; include/deepwell/targets/file_sums.hpp). dw_crc32c: *out = the CRC-32C
 * of `bytes` bytes continuing `crc` (0 to start). dw_section_sums: the
 * stored sums of a section of `bytes` bytes, one a 4 KiB block (the last
 * one completed with zeros), (bytes + 4095) / 4096 of them to out. */
DW_API int dw_crc32c(uint32_t crc, const void* data, uint64_t bytes, uint32_t* out);
DW_API int dw_section_sums(const void* data, uint64_t bytes, uint32_t* out);
/* Opens the column file at `path` (its header, descriptors, statistics and
 * sums checked) and checks every block of the named column (NULL or "":
 * every column) on `threads` threads (0: every core). DW_EIO naming the
 * file, the column and the bytes of the first bad block; *checked (may be
 * NULL) = 0 for a version-1 file, which has no sums. Python: deepwell.table. */
DW_API int dw_column_file_verify(const char* path, const char* column, uint32_t threads, int32_t* checked);


/* ---- checkpoints (docs/checkpoints.md): named buffers saved to a file so
 * that a crash at any moment leaves the previous checkpoint or the new one
 * whole. Built from src/capi/checkpoint_api.cpp. ---- */

typedef struct dw_checkpoint dw_checkpoint;

typedef struct dw_checkpoint_tensor {
  const char* name;     /* unique, 1 to 1024 bytes */
  const char* dtype;    /* up to 64 bytes; NULL: "" (kept and compared, never interpreted) */
  const int64_t* shape; /* ndim values (NULL when ndim is 0) */
  int32_t ndim;         /* 0 to 32 */
  uint64_t bytes;
} dw_checkpoint_tensor;

enum dw_checkpoint_mode {
  DW_CHECKPOINT_OPEN = 0,   /* an existing store (a manifest, if given, must match it) */
  DW_CHECKPOINT_CREATE = 1, /* format the file as a new store of the manifest (created, or grown, to its size) */
};

typedef struct dw_checkpoint_options {
  uint32_t size;         /* sizeof(dw_checkpoint_options): dw_checkpoint_options_init sets it */
  const char* path;
  int32_t mode;          /* dw_checkpoint_mode */
  int32_t writable;      /* 0: load only (the file may be read-only); default 1 */
  uint32_t unit;         /* create: bytes per page hash (incremental granularity); 0: the page size */
  int32_t allow_older;   /* open the previous generation when the newest superblock is corrupted (else DW_EIO) */
  dw_cache_options cache; /* init: 64 KiB pages, 16 queue pairs on a GPU (4 on a host), 128 entries each */
} dw_checkpoint_options;

typedef struct dw_checkpoint_save_info {
  uint64_t generation;     /* of the checkpoint saved */
  uint64_t data_bytes;     /* of the buffers */
  uint64_t bytes_written;  /* into the file: changed units, the slot's table, superblocks */
  uint64_t units_written;  /* changed units (of units_total) */
  uint64_t units_total;
  int32_t incremental;     /* the slot's previous contents were known (else all written) */
  int32_t slot;
  double seconds;
} dw_checkpoint_save_info;

DW_API void dw_checkpoint_options_init(dw_checkpoint_options* o);
/* Opens (or with DW_CHECKPOINT_CREATE formats) a checkpoint store. A store
 * opened with a manifest (n > 0, or manifest != NULL) must hold exactly it:
 * names, order, bytes, dtypes, shapes; the error names the first difference.
 * DW_EIO: an empty file, a file that is not a store, a corrupted newest
 * superblock (unless allow_older: then the previous generation is opened). */
DW_API int dw_checkpoint_open(const dw_checkpoint_options* o, const dw_checkpoint_tensor* manifest, uint32_t n,
                              dw_checkpoint** out);
/* NULL is ignored. */
DW_API int dw_checkpoint_close(dw_checkpoint* c);
/* The newest checkpoint's generation; 0: none saved yet. */
DW_API int dw_checkpoint_generation(dw_checkpoint* c, uint64_t* generation);
DW_API int dw_checkpoint_count(dw_checkpoint* c, uint32_t* n);
/* Tensor i of the store's manifest; its strings and shape live until dw_checkpoint_close. */
DW_API int dw_checkpoint_tensor_at(dw_checkpoint* c, uint32_t i, dw_checkpoint_tensor* out);
/* Bytes a store of this manifest needs with hash units of `unit` bytes. */
DW_API int dw_checkpoint_bytes_needed(const dw_checkpoint_tensor* manifest, uint32_t n, uint32_t unit,
                                      uint64_t* bytes);
/* Saves data[0 .. n) (the manifest's order; n = its count) as the next
 * generation and returns once it is durable. on_device[i] != 0: device
 * memory of the store's device (on_device NULL: all host memory). The
 * buffers must not change during the call; GPU work is synchronized before
 * it returns. info may be NULL. */
DW_API int dw_checkpoint_save(dw_checkpoint* c, void* const* data, const int32_t* on_device, uint32_t n,
                              dw_checkpoint_save_info* info);
/* Copies the newest checkpoint into data[i] (NULL: skip tensor i), checking
 * every unit. On failure (DW_EIO: corrupt or torn data, an I/O error) the
 * buffers may be partly written, unless verify_first (which reads twice). */
DW_API int dw_checkpoint_load(dw_checkpoint* c, void* const* data, const int32_t* on_device, uint32_t n,
                              int32_t verify_first);
/* Reads and checks the newest checkpoint without copying it anywhere. */
DW_API int dw_checkpoint_verify(dw_checkpoint* c);

/* ---- key-value store (docs/kv.md): 8-byte keys (0 .. 2^64 - 3) and values
 * of a fixed size in a file (many times the GPU's memory), batched SET, GET
 * and DELETE through a page cache (on a GPU, or a host cache for CPU
 * threads). A SET or DELETE call returns once its batch is durable (a
 * write-ahead log); after a crash, opening the store recovers it to the
 * state before or after each batch. Built from src/capi/kv_api.cpp. ---- */

typedef struct dw_kv dw_kv;

enum dw_kv_mode {
  DW_KV_OPEN = 0,   /* an existing store (recovered at open) */
  DW_KV_CREATE = 1, /* a new store in the file (created, or truncated and sized) */
};

/* Per-key results (status arrays). */
enum dw_kv_status {
  DW_KV_OK = 0,        /* set: stored; delete: deleted; get: found */
  DW_KV_NOT_FOUND = 1, /* delete, get: no such key */
  DW_KV_FULL = 2,      /* set: no free slot where the key may go (nothing changed) */
  DW_KV_BAD_KEY = 3,   /* a key above 2^64 - 3 (nothing changed) */
};

typedef struct dw_kv_options {
  uint32_t size;          /* sizeof(dw_kv_options): dw_kv_options_init sets it */
  const char* path;       /* a file; in server mode (dw_set_server, DEEPWELL_SERVER) a dataset the server
                             grants this process for writing, by name or path (create formats it as it is) */
  int32_t mode;           /* dw_kv_mode */
  uint32_t value_bytes;   /* create: 8 to 128, a multiple of 8; open: 0 (any) or the store's (checked) */
  uint32_t bucket_bytes;  /* create: a power of two, 512 .. 64 KiB; 0: 4096 */
  uint32_t max_probe;     /* create: buckets a key may be in; 0: 16 */
  uint64_t capacity;      /* create: keys the table is sized for (75% of its slots); 0: 1M */
  uint32_t log_rows;      /* create: rows of the log (1 KiB each); 0: 65536 */
  uint64_t max_batch;     /* keys per call; 0: 65536 */
  dw_cache_options cache; /* page_size: a multiple of bucket_bytes; 0: the larger of the default page and bucket_bytes */
} dw_kv_options;

typedef struct dw_kv_result {
  uint64_t ops;
  uint64_t inserted, updated, erased; /* set, delete */
  uint64_t found, not_found;          /* get; delete (not_found) */
  uint64_t full, bad_key;
  uint64_t superseded; /* ops overridden by a later one on the same key in the batch */
  uint64_t log_rows;   /* log rows the batch took */
  int32_t checkpointed; /* a checkpoint ran first (the log was full) */
} dw_kv_result;

typedef struct dw_kv_info {
  uint32_t key_bytes, value_bytes, bucket_bytes, slots_per_bucket, max_probe, log_rows;
  uint64_t buckets, slots;
  uint64_t file_bytes;
  uint64_t max_batch;         /* keys per call */
  int32_t device;
  uint64_t recovered_batches; /* committed batches the open replayed from the log */
  uint64_t batches;           /* batches committed since open */
  uint64_t checkpoints;       /* since open */
  int32_t table_checksums;    /* 1: the table's blocks are checked on every read (format 2) */
  int32_t header_copy_damaged; /* open found a log header copy that failed its checksum (and replaced it) */
} dw_kv_info;

/* Defaults: its size, DW_KV_OPEN, a host cache (device -1) with the cache
 * defaults, the store's shape 0 (the library's choice). */
DW_API void dw_kv_options_init(dw_kv_options* o);
/* Bytes a store of this shape takes (0 arguments: the defaults). */
DW_API int dw_kv_bytes_needed(uint32_t value_bytes, uint64_t capacity, uint32_t bucket_bytes, uint32_t log_rows,
                              uint64_t* bytes);
/* Opens (recovering it) or creates a store. DW_EIO: the file cannot be
 * opened, is not a store, or its header or log is corrupted; DW_EINVAL: a
 * bad option, or value_bytes other than the store's. Messages name the file. */
DW_API int dw_kv_open(const dw_kv_options* o, dw_kv** out);
/* Checkpoints (so that the next open replays nothing), then frees the
 * handle whatever the checkpoint returns (batches are durable already).
 * NULL is ignored. */
DW_API int dw_kv_close(dw_kv* kv);
DW_API int dw_kv_info_get(dw_kv* kv, dw_kv_info* info);
/* Batches of n keys (n <= max_batch). keys: n uint64; values: n x
 * value_bytes bytes, 8-byte aligned; status: n bytes of dw_kv_status, or
 * NULL. With on_device, all of them are device memory of the store's GPU,
 * else host memory. result may be NULL. Keys repeated in a batch: the last
 * one wins. set and delete return once the batch is durable; a failed
 * batch (DW_EIO) may or may not be: the handle then refuses further
 * batches; open the file again. get fills values with zeros where a key is
 * not found. */
DW_API int dw_kv_set(dw_kv* kv, const uint64_t* keys, const void* values, uint64_t n, int32_t on_device,
                     uint8_t* status, dw_kv_result* result);
DW_API int dw_kv_get(dw_kv* kv, const uint64_t* keys, void* values, uint64_t n, int32_t on_device, uint8_t* status,
                     dw_kv_result* result);
DW_API int dw_kv_delete(dw_kv* kv, const uint64_t* keys, uint64_t n, int32_t on_device, uint8_t* status,
                        dw_kv_result* result);
/* Writes the table's dirty pages back, flushes, truncates the log. */
DW_API int dw_kv_checkpoint(dw_kv* kv);

/* ---- vector search (docs/vectors.md) ----
 * An index file (.dwv) of vectors on storage: a graph whose node records
 * (vector and neighbours) are read through the page cache as a search
 * visits them, with product-quantised codes kept in memory to steer it. */
typedef struct dw_vectors dw_vectors;

typedef enum dw_vector_type { DW_VECTORS_F32 = 0, DW_VECTORS_F16 = 1, DW_VECTORS_U8 = 2 } dw_vector_type;
typedef enum dw_vector_metric { DW_VECTORS_L2 = 0, DW_VECTORS_IP = 1 } dw_vector_metric;

typedef struct dw_vectors_build_options {
  uint32_t size;         /* sizeof(dw_vectors_build_options): dw_vectors_build_options_init sets it */
  uint32_t degree;       /* neighbours a node at most, 1 to 256; 0: 32 */
  uint32_t list;         /* the build's search list, >= degree; 0: 64 */
  uint32_t passes;       /* Vamana passes after the first graph; default 2 */
  uint32_t pq_subspaces; /* quantiser subspaces dividing dim; 0: dim / 4 (dim / 2 for the inner product) where it divides, at most 64 */
  uint32_t page_bytes;   /* 0: the smallest power of two >= 4096 holding a record */
  uint32_t threads;      /* 0: every core */
  float alpha;           /* RobustPrune's, 1 to 4; 0: 1.2 */
} dw_vectors_build_options;

typedef struct dw_vectors_build_info {
  uint64_t vectors, edges;
  uint32_t pq_subspaces;
  double quantiser_seconds, graph_seconds, write_seconds;
} dw_vectors_build_info;

DW_API void dw_vectors_build_options_init(dw_vectors_build_options* o);
/* Builds the index of count x dim vectors of `type` (host memory, row after
 * row) for `metric` into `path` (written beside it, synced, then renamed).
 * o and info may be NULL. DW_EINVAL names a bad argument or a NaN. */
DW_API int dw_vectors_build(const void* data, uint64_t count, uint32_t dim, int32_t type, int32_t metric,
                            const char* path, const dw_vectors_build_options* o, dw_vectors_build_info* info);

typedef struct dw_vectors_options {
  uint32_t size;          /* sizeof(dw_vectors_options): dw_vectors_options_init sets it */
  const char* path;       /* the index; in server mode a dataset the server grants this process */
  dw_cache_options cache; /* page_size 0: the index's page */
} dw_vectors_options;

typedef struct dw_vectors_info {
  uint64_t count;
  uint32_t dim;
  int32_t type, metric;
  uint32_t degree, page_bytes, pq_subspaces;
  int32_t device;
  uint64_t records_bytes; /* what the searches read through the cache */
  uint64_t cache_bytes;
} dw_vectors_info;

typedef struct dw_vectors_search_result {
  uint64_t expansions; /* nodes expanded: fetched for themselves, or in a page fetched for another */
  uint64_t distances;  /* quantised distances computed */
  uint64_t bad_ids;    /* neighbour ids past the index (a damaged record) */
} dw_vectors_search_result;

DW_API void dw_vectors_options_init(dw_vectors_options* o);
/* DW_EIO: the file is no index, or its header, codebook or codes are damaged. */
DW_API int dw_vectors_open(const dw_vectors_options* o, dw_vectors** out);
DW_API int dw_vectors_close(dw_vectors* v);
DW_API int dw_vectors_info_get(dw_vectors* v, dw_vectors_info* info);
/* The k nearest of each of nq queries (nq x dim float32): ids (nq x k,
 * UINT32_MAX where fewer were found) and distances (nq x k float; squared
 * L2, or the negated inner product), nearest first. list: candidates kept
 * (>= k; 0: 64), width: pages fetched a step (0: 4). With on_device, the
 * queries, ids and distances are device memory of the index's GPU, else
 * host memory. result may be NULL. DW_EIO: a record could not be read (a
 * damaged block: the message names the node). */
DW_API int dw_vectors_search(dw_vectors* v, const float* queries, uint64_t nq, uint32_t k, uint32_t list,
                             uint32_t width, int32_t on_device, uint32_t* ids, float* distances,
                             dw_vectors_search_result* result);

/* How a search uses each page it fetches (dw_vectors_search_options.pages). */
enum {
  DW_PAGES_NEARER = 0, /* every record gets its exact distance; those nearer the query than the picked one join the list */
  DW_PAGES_ALL = 1,    /* every record gets its exact distance and joins the list */
  DW_PAGES_PICKED = 2  /* only the picked record is used (DiskANN's search) */
};

typedef struct dw_vectors_search_options {
  uint32_t size;           /* sizeof(dw_vectors_search_options): dw_vectors_search_options_init sets it */
  uint32_t k;              /* neighbours a query (10) */
  uint32_t list;           /* candidates kept, >= k (64) */
  uint32_t width;          /* pages fetched a step, 1 to 32 (4) */
  uint32_t max_expansions; /* nodes expanded at most; 0: 4 x list (2 x list with DW_PAGES_PICKED) */
  int32_t pages;           /* DW_PAGES_NEARER (the default), DW_PAGES_ALL or DW_PAGES_PICKED */
  uint32_t entry_sample;   /* 0: start at the entry node; N: at the nearest (by code) of it and N nodes spread over
                              the index, at most 65536 (1024) */
} dw_vectors_search_options;

typedef struct dw_vectors_search_counts {
  uint64_t expansions; /* nodes expanded: fetched for themselves, or in a page fetched for another */
  uint64_t distances;  /* quantised distances computed */
  uint64_t bad_ids;    /* neighbour ids past the index (a damaged record) */
  uint64_t fetches;    /* pages (records, with DW_PAGES_PICKED) fetched through the cache */
  uint64_t page_mates; /* of the expansions, nodes in a page fetched for another */
} dw_vectors_search_counts;

DW_API void dw_vectors_search_options_init(dw_vectors_search_options* o);
/* dw_vectors_search with every option: o NULL takes the defaults, counts
 * may be NULL. DW_EINVAL names a bad option. */
DW_API int dw_vectors_search_with(dw_vectors* v, const float* queries, uint64_t nq, const dw_vectors_search_options* o,
                                  int32_t on_device, uint32_t* ids, float* distances, dw_vectors_search_counts* counts);

#ifdef __cplusplus
}
#endif

#endif /* DEEPWELL_C_DEEPWELL_H */
