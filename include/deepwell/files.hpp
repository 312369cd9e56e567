// The GPUfs-style file API in one include: a file system over a tree whose
// files kernels open, read, write and close (files/file_system.hpp), and the
// kernels' view of it (files/gfs_ref.hpp). docs/files.md.
#pragma once

#include "deepwell/files/file_system.hpp"
#include "deepwell/files/gfs_ref.hpp"
