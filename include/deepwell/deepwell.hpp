// The library in one include: arrays and rows of a dataset seen through the
// page cache (views), the cache itself, the link to a controller (in this
// process or `deepwell serve`), and the in-process controller's makers.
// Kernels need only views/array.hpp; GPU launch checks are in
// cache/gpu_launch.hpp (CUDA code). The layers, bottom up:
//   common/     errors, defaults, sizes, checksums, logging
//   protocol/   what crosses between client and controller: NVMe entries,
//               queue memory, the host tier's layout, request statuses
//   link/       a client's side: controller_link, server_link, queue clients
//   targets/    where bytes live: files, block devices, host memory, checks
//   controller/ the trusted controller and what starts one in this process
//   cache/      the page cache (host owner and the kernels' ref)
//   views/      arrays and rows
//   files/ durable/ graph/ table/  services on the cache (files.hpp,
//               durable.hpp, graph.hpp, table.hpp)
#pragma once

#include "deepwell/cache/page_cache.hpp"
#include "deepwell/common/error.hpp"
#include "deepwell/controller/embedded.hpp"
#include "deepwell/link/controller_link.hpp"
#include "deepwell/link/server_link.hpp"
#include "deepwell/views/array.hpp"
#include "deepwell/views/rows.hpp"
