/* deepwell's C ABI: checkpoints. */
#ifndef DEEPWELL_C_CHECKPOINT_H
#define DEEPWELL_C_CHECKPOINT_H

#include "deepwell/c/base.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif /* DEEPWELL_C_CHECKPOINT_H */
