/* deepwell's C ABI: the key-value store. */
#ifndef DEEPWELL_C_KV_H
#define DEEPWELL_C_KV_H

#include "deepwell/c/base.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif /* DEEPWELL_C_KV_H */
