// Durability services in one include: the write-ahead log, the key-value
// store and checkpoints of device buffers. docs/durability.md.
#pragma once

#include "deepwell/durable/checkpoint.hpp"
#include "deepwell/durable/kv_store.hpp"
#include "deepwell/durable/log.hpp"
