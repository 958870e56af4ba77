// The host side of the CUDA layer norm backward (layer_norm.cu) as plain C++: how the weight and
// bias gradients' column sums are tiled into blocks.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cuda/launch_shape.h"

namespace kiln::backend::cuda {

// Column tiles of kWarp columns times chunks of rows_per_chunk rows (the last may be shorter):
// about rows / 32 chunks of at most 32 rows, or fewer, longer ones where that would make more
// than about 2048 blocks. The split depends on rows and n only, so the sums come out the same
// on every device and every run.
struct ParamChunks {
  int64_t tiles = 1, rows_per_chunk = 1, chunks = 1;
};

inline ParamChunks param_chunks(int64_t rows, int64_t n) {
  ParamChunks p;
  p.tiles = (n + kWarp - 1) / kWarp;
  const int64_t max_chunks = std::max<int64_t>(1, 2048 / p.tiles);
  const int64_t want = std::clamp<int64_t>((rows + 31) / 32, 1, max_chunks);
  p.rows_per_chunk = std::max<int64_t>(1, (rows + want - 1) / want);
  p.chunks = std::max<int64_t>(1, (rows + p.rows_per_chunk - 1) / p.rows_per_chunk);
  return p;
}

}  // namespace kiln::backend::cuda
