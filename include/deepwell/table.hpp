// Column tables in one include: the column file's layout, reader and writer
// (each column a dataset of its own). docs/analytics.md.
#pragma once

#include "deepwell/table/column_file.hpp"
