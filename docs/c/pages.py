"""Writes docs/c/<function>.md, one reference page per function of the C ABI, from the
prototypes in include/deepwell/c/deepwell.h (so a synopsis cannot drift from the header) and
the descriptions below. python/tests/test_c_pages.py checks that every DW_API function has a
page, every page a function, and that the pages are what this script writes.
    python3 docs/c/pages.py"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
HEADERS = ROOT / "include" / "deepwell" / "c"  # deepwell.h includes every part


def header_text() -> str:
    """Every part of the C ABI's headers, in the order deepwell.h includes them."""
    parts = re.findall(r'#include "deepwell/c/(\w+\.h)"', (HEADERS / "deepwell.h").read_text())
    return "\n".join((HEADERS / name).read_text() for name in parts)
OUT = ROOT / "docs" / "c"

ERRORS = {
    "DW_EINVAL": "a bad argument: a null pointer, a field out of range, an options `size` the library cannot take",
    "DW_EIO": "a file that cannot be opened, read or written, corrupt stored data, or an NVMe error status",
    "DW_ERANGE": "an index out of range",
    "DW_ENOCUDA": "no CUDA driver or device, or a library built without CUDA",
    "DW_ERUNTIME": "anything else: a timeout, a lost controller or server, a CUDA error",
}

# name: (description, errors beyond DW_EINVAL, see also)
PAGES = {
    "dw_abi_version": ("Returns `DW_ABI_VERSION` as the library was built. A program built against another "
                       "`deepwell.h` compares the two before it calls anything else; the Python package refuses "
                       "a library whose version differs from its own.", None, ["dw_last_error"]),
    "dw_parse_size": ("Parses a size written as text (`4096`, `512K`, `64MiB`, `1.5GiB`, `1TiB`: powers of 1024, "
                      "any case) into `*bytes`, by the one rule the command line, the environment and the "
                      "server's TOML use (docs/settings.md).", [], ["dw_array_options_init"]),
    "dw_check_settings": ("Checks every `DEEPWELL_*` setting in the environment (docs/settings.md), whichever call "
                          "would read it: the first bad one is named (`DEEPWELL_LOG=loud is not one of quiet, warn "
                          "or info`). The Python package calls it when it is imported.", [], ["dw_parse_size"]),
    "dw_last_error": ("The message of the last failed call on this thread, naming the problem (the file, the "
                      "field, the index). Valid until the thread's next call into the library.", None, []),
    "dw_cuda_device_count": ("Stores the number of CUDA devices in `*count`.", ["DW_ENOCUDA"], ["dw_array_open"]),
    "dw_array_options_init": ("Fills `*o` with the defaults: `size` = `sizeof(dw_array_options)`, the cache "
                              "fields from the environment (`DEEPWELL_*`) or the built-in defaults "
                              "(docs/settings.md), a host cache (`cache.device` = -1), read-only, gathers "
                              "through the cache. Call it before setting any field: `dw_array_open` refuses "
                              "options whose `size` it did not write.", None, ["dw_array_open"]),
    "dw_array_open": ("Opens a dataset of fixed-size rows (`row_bytes`) through a page cache, on the GPU "
                      "`cache.device` or in host memory for CPU threads (`cache.device` = -1). The dataset is "
                      "`path` (a file or block device, from `offset`, `length` bytes or to its end) or, with "
                      "`path` NULL, `host_bytes` of zeroed host memory. Handles opened on the same file, range, "
                      "device and cache options share one controller, namespace and cache, so a scatter through "
                      "one is seen by a gather through another. While a server is named (`dw_set_server`, "
                      "`DEEPWELL_SERVER`), `path` names a dataset the server grants this process. An array of "
                      "drives instead of `path`: `members[0 .. member_count)` name files or block devices alike "
                      "in size, `layout` `DW_LAYOUT_STRIPE` (`chunk_bytes` of the dataset to each member in turn, "
                      "default 64 KiB) or `DW_LAYOUT_MIRROR` (every member holds it all; a member that fails is "
                      "skipped and named in `dw_array_info.route`); `create` makes the missing members. No "
                      "members, members of different sizes, a chunk that is not a power of two from 512 B to "
                      "64 MiB, `path` as well, or a member that cannot be opened (`DW_EIO`) is refused naming "
                      "it.",
                      ["DW_EIO", "DW_ENOCUDA", "DW_ERUNTIME"], ["dw_array_options_init", "dw_array_close", "dw_array_gather", "dw_set_server"]),
    "dw_set_server": ("Names the server (its socket) that later `dw_array_open`, `dw_kv_open` and "
                      "`dw_checkpoint_open` calls of this process go through; NULL goes back to "
                      "`DEEPWELL_SERVER` (unset: an embedded controller). Open handles keep their link.",
                      [], ["dw_server_stats", "dw_array_open"]),
    "dw_server_stats": ("The named server's statistics as JSON (what `deepwell stat --json` prints, as this "
                        "client may see them) into `buf`, `bytes` long, truncated and NUL-terminated; "
                        "`*needed` (if not NULL) gets the full length plus one.", ["DW_ERUNTIME"], ["dw_set_server"]),
    "dw_array_close": ("Waits for the device, writes dirty pages back and flushes, then frees the handle (and "
                       "the cache, when no other handle shares it). NULL is ignored. Must not race with other "
                       "calls on the handle.", ["DW_EIO", "DW_ERUNTIME"], ["dw_array_open", "dw_array_flush"]),
    "dw_array_info_get": ("Fills `*info`: rows, row and page sizes, the cache's bytes and pages, the device, "
                          "whether it is writable, whether reads have a direct tier and gather in place, the "
                          "controller's I/O backend, and `route`: how misses are filled, in words, and why a "
                          "faster route was not taken; for an array of drives, then its layout and members as "
                          "they are now (a mirror's failed members marked).", [], ["dw_array_stats_get"]),
    "dw_array_gather": ("Copies rows `idx[0 .. n)` into `out` (`n * row_bytes` bytes). `idx_bits` is 32 or 64 "
                        "(signed). GPU arrays: `out` is device memory of the array's device and `idx` device "
                        "memory, or host memory with `idx_on_host` (copied on the stream); the work is queued on "
                        "`stream` and the call returns at once. CPU arrays: both in host memory, `stream` ignored, "
                        "the call returns when done. Errors inside the kernel (an index out of range, an I/O "
                        "error) are reported by `dw_array_check`.", ["DW_ERANGE", "DW_EIO", "DW_ERUNTIME"],
                        ["dw_array_scatter", "dw_array_check"]),
    "dw_array_scatter": ("Writes rows `src[0 .. n)` into rows `idx[0 .. n)`; their pages become dirty and are "
                         "written back on eviction, `dw_array_flush` or `dw_array_close`. Memory as for "
                         "`dw_array_gather`. The array must be writable.", ["DW_ERANGE", "DW_EIO", "DW_ERUNTIME"],
                         ["dw_array_gather", "dw_array_flush", "dw_array_check"]),
    "dw_array_check": ("Waits for `stream`, then reports and forgets the first problem of the gathers and "
                       "scatters before it: an index out of range, an I/O error, a timeout or a CUDA error.",
                       ["DW_ERANGE", "DW_EIO", "DW_ERUNTIME"], ["dw_array_gather"]),
    "dw_array_flush": ("Waits for the device, writes every dirty page back and flushes the file, so that "
                       "what was scattered is durable.", ["DW_EIO", "DW_ERUNTIME"], ["dw_array_scatter", "dw_array_clear"]),
    "dw_array_clear": ("Flushes, then empties the cache, so that the next gathers start cold.",
                       ["DW_EIO", "DW_ERUNTIME"], ["dw_array_flush"]),
    "dw_array_stats_get": ("Fills `*s` with the cache's counters since open or the last reset: accesses, hits, "
                           "misses, evictions, write-backs, bytes, fills from the direct tier and a server's host "
                           "tier, and the controller's commands and CPU time.", [], ["dw_array_stats_reset", "dw_array_info_get"]),
    "dw_array_stats_reset": ("Sets the counters `dw_array_stats_get` reports back to zero.", [], ["dw_array_stats_get"]),
    "dw_uring_read_rows": ("The baseline without deepwell: reads rows `rows[0 .. n)` of `row_bytes` from the "
                           "file at `offset` with plain io_uring on `threads` CPU threads, `depth` reads in flight "
                           "each (no controller, no cache), into `out` (host memory, `n * row_bytes`; NULL: a "
                           "scratch buffer), and stores the wall time in `*seconds`.", ["DW_EIO"], ["dw_array_gather"]),
    "dw_crc32c": ("Stores in `*out` the CRC-32C of `bytes` bytes at `data`, continuing `crc` (0 to start): the "
                  "checksum of deepwell's read-only file formats.", [], ["dw_section_sums", "dw_column_file_verify"]),
    "dw_section_sums": ("Writes the stored sums of a section of `bytes` bytes at `data` to `out`: one CRC-32C a "
                        "4 KiB block (the last block completed with zeros), `(bytes + 4095) / 4096` of them.",
                        [], ["dw_crc32c"]),
    "dw_column_file_verify": ("Opens the column file at `path` (its header, descriptors, statistics and sums "
                              "checked) and checks every block of the named column (NULL or \"\": every column) "
                              "on `threads` threads (0: every core). `*checked` (may be NULL) is 0 for a "
                              "version-1 file, which has no sums.", ["DW_EIO"], ["dw_crc32c"]),
    "dw_checkpoint_options_init": ("Fills `*o`: `size`, `DW_CHECKPOINT_OPEN`, writable, and a checkpoint "
                                   "store's cache defaults (64 KiB pages, 32 entries a queue pair; queue pairs 0: "
                                   "4, on a GPU as on a host).", None, ["dw_checkpoint_open"]),
    "dw_checkpoint_open": ("Opens, or with `DW_CHECKPOINT_CREATE` formats, a checkpoint store at `path` (under "
                           "a server: a dataset it grants this process for writing). A store opened with a "
                           "manifest (`n` > 0 or `manifest` not NULL) must hold exactly it: names, order, bytes, "
                           "dtypes, shapes; the error names the first difference. A corrupted newest superblock is "
                           "`DW_EIO` unless `allow_older`, which opens the previous generation.",
                           ["DW_EIO", "DW_ENOCUDA", "DW_ERUNTIME"], ["dw_checkpoint_options_init", "dw_checkpoint_save", "dw_checkpoint_load"]),
    "dw_checkpoint_close": ("Frees the handle. NULL is ignored.", [], ["dw_checkpoint_open"]),
    "dw_checkpoint_generation": ("Stores the newest checkpoint's generation in `*generation`; 0 when none "
                                 "has been saved.", [], ["dw_checkpoint_save"]),
    "dw_checkpoint_count": ("Stores the number of tensors of the store's manifest in `*n`.", [], ["dw_checkpoint_tensor_at"]),
    "dw_checkpoint_tensor_at": ("Fills `*out` with tensor `i` of the store's manifest; its strings and shape "
                                "live until `dw_checkpoint_close`.", [], ["dw_checkpoint_count"]),
    "dw_checkpoint_bytes_needed": ("Stores in `*bytes` the file size a store of this manifest needs with hash "
                                   "units of `unit` bytes (0: 64 KiB).", [], ["dw_checkpoint_open"]),
    "dw_checkpoint_save": ("Saves `data[0 .. n)` (the manifest's order; `n` is its count) as the next "
                           "generation and returns once it is durable: a crash at any moment leaves the previous "
                           "checkpoint or this one whole. `on_device[i]` != 0: device memory of the store's "
                           "device (`on_device` NULL: all host memory). The buffers must not change during the "
                           "call. `info` (may be NULL) gets the generation, bytes written, changed units and time.",
                           ["DW_EIO", "DW_ERUNTIME"], ["dw_checkpoint_load"]),
    "dw_checkpoint_load": ("Copies the newest checkpoint into `data[i]` (NULL: skip tensor `i`), checking every "
                           "unit. On failure the buffers may be partly written, unless `verify_first`, which "
                           "reads the checkpoint twice.", ["DW_EIO", "DW_ERUNTIME"], ["dw_checkpoint_save", "dw_checkpoint_verify"]),
    "dw_checkpoint_verify": ("Reads and checks the newest checkpoint without copying it anywhere.",
                             ["DW_EIO"], ["dw_checkpoint_load"]),
    "dw_kv_options_init": ("Fills `*o`: `size`, `DW_KV_OPEN`, a host cache with the defaults "
                           "(`cache.page_size` 0: the larger of the default page and the store's buckets, known "
                           "at open), and 0 (the library's choice) in the store's shape fields.", None, ["dw_kv_open"]),
    "dw_kv_bytes_needed": ("Stores in `*bytes` the file size a store of this shape takes (0 arguments: the "
                           "defaults).", [], ["dw_kv_open"]),
    "dw_kv_open": ("Opens (recovering it from its log) or, with `DW_KV_CREATE`, creates a store of 8-byte keys "
                   "and fixed-size values at `path` (under a server: a dataset it grants this process for "
                   "writing). Messages name the file.", ["DW_EIO", "DW_ENOCUDA", "DW_ERUNTIME"],
                   ["dw_kv_options_init", "dw_kv_set", "dw_kv_close"]),
    "dw_kv_close": ("Checkpoints (so that the next open replays nothing), then frees the handle whatever the "
                    "checkpoint returns (batches are durable already). NULL is ignored.", ["DW_EIO"], ["dw_kv_checkpoint"]),
    "dw_kv_info_get": ("Fills `*info` with the store's shape, its file's size, the device, the batches recovered "
                       "at open and committed since, and whether its table's blocks carry checksums.", [], ["dw_kv_open"]),
    "dw_kv_set": ("Stores `n` keys (`n` <= `max_batch`) with their values (`n` x `value_bytes`, 8-byte aligned); "
                  "a key repeated in the batch: the last wins. Returns once the batch is durable. `status` (`n` "
                  "bytes of `dw_kv_status`, or NULL) says per key: stored, `DW_KV_FULL`, `DW_KV_BAD_KEY`. With "
                  "`on_device` all buffers are device memory of the store's GPU. After `DW_EIO` the batch may "
                  "or may not be durable and the handle refuses further batches: open the file again.",
                  ["DW_EIO", "DW_ERUNTIME"], ["dw_kv_get", "dw_kv_delete"]),
    "dw_kv_get": ("Looks up `n` keys, filling their values (zeros where a key is not found) and `status` "
                  "(`DW_KV_OK` or `DW_KV_NOT_FOUND`). Memory as for `dw_kv_set`.", ["DW_EIO", "DW_ERUNTIME"], ["dw_kv_set"]),
    "dw_kv_delete": ("Deletes `n` keys and returns once the batch is durable; `status` says deleted or "
                     "`DW_KV_NOT_FOUND`.", ["DW_EIO", "DW_ERUNTIME"], ["dw_kv_set"]),
    "dw_kv_checkpoint": ("Writes the table's dirty pages back, flushes and truncates the log.", ["DW_EIO"], ["dw_kv_close"]),
    "dw_vectors_build_options_init": ("Fills `*o` with the build's defaults: `size` = "
                                      "`sizeof(dw_vectors_build_options)`, degree 32, list 64, two Vamana passes, "
                                      "alpha 1.2, 0 (the library's choice) in the quantiser and page fields, every "
                                      "core, `shard_vectors` 0 (the graph built at once).", None, ["dw_vectors_build"]),
    "dw_vectors_build": ("Builds the vector index of `count` x `dim` vectors of `type` (`DW_VECTORS_F32`, `F16`, "
                         "`U8`; host memory, row after row) for `metric` (`DW_VECTORS_L2`, `DW_VECTORS_IP`) into "
                         "`path`, on CPU threads: written beside it, synced, then renamed. The same input and "
                         "options give the same file. With `o->shard_vectors` (at least 1024) a larger set's "
                         "graph is built out of core, in overlapping shards of at most that many vectors merged "
                         "into one graph: only one shard's rows and its working memory are held at a time. An `o` "
                         "whose `size` ends before `shard_vectors` (32 bytes, the first layout) builds at once. "
                         "`o` and `info` may be NULL. A NaN or an infinity in the "
                         "vectors, or an option out of range, is named.", ["DW_EIO"], ["dw_vectors_open"]),
    "dw_vectors_options_init": ("Fills `*o` with the defaults: `size` = `sizeof(dw_vectors_options)`, the cache "
                                "fields from the environment or the built-in defaults, a host cache, `page_size` 0 "
                                "(the index's page).", None, ["dw_vectors_open"]),
    "dw_vectors_open": ("Opens the vector index at `path` (under a server: a dataset it grants this process) on a "
                        "page cache of `cache.device` (or a host cache and CPU threads, device -1): checks the "
                        "header, reads and checks the codebook and the codes, and serves the records through the "
                        "cache, each page checked against its sum as it is read.",
                        ["DW_EIO", "DW_ENOCUDA", "DW_ERUNTIME"], ["dw_vectors_options_init", "dw_vectors_search",
                                                                 "dw_vectors_close"]),
    "dw_vectors_close": ("Frees the handle and its cache. NULL is ignored.", [], ["dw_vectors_open"]),
    "dw_vectors_info_get": ("Fills `*info` with the index's shape (count, dim, type, metric, degree, page, "
                            "quantiser subspaces), the device, the bytes of its records and of the cache.", [],
                            ["dw_vectors_open"]),
    "dw_vectors_search": ("Finds the `k` nearest of each of `nq` queries (`nq` x `dim` float32): `ids` (`nq` x "
                          "`k`, `UINT32_MAX` where fewer were found) and `distances` (squared L2, or the negated "
                          "inner product), nearest first. `list` (>= k; 0: 64) candidates are kept, `width` (0: 4) "
                          "pages fetched a step (every record of a fetched page is used). With `on_device` the "
                          "queries, ids and distances are device memory "
                          "of the index's GPU. GPU and CPU clients give the same answers. A record that cannot be "
                          "read (a damaged block) fails the call naming the node.", ["DW_EIO", "DW_ERUNTIME"],
                          ["dw_vectors_open", "dw_vectors_search_with"]),
    "dw_vectors_search_options_init": ("Fills `*o` with the search's defaults (k 10, list 64, width 4, "
                                       "`DW_PAGES_NEARER`, entry sample 1024) and its `size`.", [], ["dw_vectors_search_with"]),
    "dw_vectors_search_with": ("`dw_vectors_search` with every option (`o` NULL: the defaults). `pages` says how a "
                               "search uses each page it fetches: `DW_PAGES_NEARER` (every record gets its exact "
                               "distance, those nearer the query than the picked one join the candidates), "
                               "`DW_PAGES_ALL` (all of them join) or `DW_PAGES_PICKED` (only the picked record, as "
                               "DiskANN searches). `max_expansions` bounds the nodes a query expands (0: 4 x list, "
                               "2 x list with `DW_PAGES_PICKED`). `entry_sample` says where each query starts: 0, "
                               "the index's entry node; N (at most 65536; 1024 by default), the nearest by code of it and N "
                               "nodes spread over the index (a caller built before the field gets the default). `counts` (may be NULL) gets the nodes expanded, "
                               "the pages fetched, the page mates expanded without a fetch, the quantised distances "
                               "and the bad neighbour ids.", ["DW_EIO", "DW_ERUNTIME"],
                               ["dw_vectors_search_options_init", "dw_vectors_search"]),
}


def prototypes():
    """{name: the prototype as the header declares it, on one line}."""
    text = re.sub(r"/\*.*?\*/", "", header_text(), flags=re.S)
    out = {}
    for m in re.finditer(r"DW_API\s+([^;]*?\b(dw_\w+)\s*\([^;]*\))\s*;", text, flags=re.S):
        out[m.group(2)] = " ".join(m.group(1).split()) + ";"
    return out


def page(name, proto):
    desc, errors, see = PAGES[name]
    lines = [f"# {name}", "", "```c", "#include <deepwell/c/deepwell.h>", "", proto, "```", "", "## Description", "", desc, ""]
    if errors is not None:
        lines += ["## Return value", "", "0 on success, else a negative `dw_errc`; `dw_last_error()` names the problem.", ""]
        lines += ["## Errors", ""] + [f"- `{e}`: {ERRORS[e]}" for e in ["DW_EINVAL"] + errors] + [""]
    if see:
        lines += ["## See also", "", ", ".join(f"[{s}]({s}.md)" for s in see), ""]
    return "\n".join(lines)


def pages():
    p = prototypes()
    return {name: page(name, p[name]) for name in p if name in PAGES}


def index(names):
    lines = ["# The C ABI, one page a function", "",
             "`include/deepwell/c/deepwell.h` (its parts: `base.h`, `array.h`, `checksums.h`, `checkpoint.h`, `kv.h`, "
             "`vectors.h`), built as `libdeepwell_c.so` (every `dw_*` symbol at the version "
             "node `DEEPWELL_C_<DW_ABI_VERSION>`). Conventions, options structures that carry their own size, "
             "and an example: [docs/api.md](../api.md). These pages are written by `docs/c/pages.py` from the "
             "header's prototypes.", ""]
    lines += [f"- [{n}]({n}.md)" for n in names] + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    written = pages()
    for name, text in written.items():
        (OUT / f"{name}.md").write_text(text)
    (OUT / "README.md").write_text(index(list(written)))
    print(f"{len(written)} pages")
