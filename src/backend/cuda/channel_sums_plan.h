// The host side of the per-channel (per-column) sums of device/channel_sums.cuh as plain C++:
// how the rows are split into blocks for tensors viewed as [outer, C, inner]. Layer norm's weight
// and bias gradients and batch norm's statistics and backward use it. The split depends on the
// sizes only, so the sums come out the same on every device and every run.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cuda/launch_shape.h"

namespace kiln::backend::cuda {

// Columns innermost (inner == 1: [rows, n]): column tiles of kWarp columns times chunks of
// rows_per_chunk rows (the last may be shorter): about rows / 32 chunks of at most 32 rows, or
// fewer, longer ones where that would make more than about 2048 blocks.
struct ColumnChunks {
  int64_t tiles = 1, rows_per_chunk = 1, chunks = 1;
};

inline ColumnChunks column_chunks(int64_t rows, int64_t n) {
  ColumnChunks p;
  p.tiles = (n + kWarp - 1) / kWarp;
  const int64_t max_chunks = std::max<int64_t>(1, 2048 / p.tiles);
  const int64_t want = std::clamp<int64_t>((rows + 31) / 32, 1, max_chunks);
  p.rows_per_chunk = std::max<int64_t>(1, (rows + want - 1) / want);
  p.chunks = std::max<int64_t>(1, (rows + p.rows_per_chunk - 1) / p.rows_per_chunk);
  return p;
}

// Channels not innermost (inner > 1): a block per (channel, chunk), each chunk `per_chunk`
// consecutive values of the channel's outer * inner (at least 16 per thread of a block), at most
// about 4096 blocks in all.
struct ChannelChunks {
  int64_t per_chunk = 1, chunks = 1;
};

inline ChannelChunks channel_chunks(int64_t per_channel, int64_t channels) {
  ChannelChunks p;
  const int64_t max_chunks = std::max<int64_t>(1, 4096 / std::max<int64_t>(channels, 1));
  const int64_t want = std::clamp<int64_t>((per_channel + 16 * kThreads - 1) / (16 * kThreads), 1, max_chunks);
  p.per_chunk = std::max<int64_t>(1, (per_channel + want - 1) / want);
  p.chunks = std::max<int64_t>(1, (per_channel + p.per_chunk - 1) / p.per_chunk);
  return p;
}

}  // namespace kiln::backend::cuda
