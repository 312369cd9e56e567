/* deepwell's C ABI: vector search. */
#ifndef DEEPWELL_C_VECTORS_H
#define DEEPWELL_C_VECTORS_H

#include "deepwell/c/base.h"

#ifdef __cplusplus
extern "C" {
#endif

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
  uint64_t shard_vectors; /* out of core: the graph built in overlapping shards of at most this many vectors
                             (>= 1024), merged; 0: the whole set at once */
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

#endif /* DEEPWELL_C_VECTORS_H */
