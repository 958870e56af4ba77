// CPU kernels for embedding: the row gather and its backward, which sums gradient rows per table
// row (grouped by a counting sort, so threads own disjoint rows: no races, deterministic order,
// embedding_math.h's).
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/loops.h"
#include "backend/dispatch.h"
#include "backend/embedding_math.h"

namespace kiln::backend::cpu {
namespace {

// Every index in [0, num): ids beyond the vocabulary are an error, never a read out of bounds.
void check_indices(const int64_t* idx, int64_t m, int64_t num) {
  for (int64_t j = 0; j < m; ++j)
    if (idx[j] < 0 || idx[j] >= num) [[unlikely]]
      KILN_FAIL("embedding", "index ", idx[j], " (at position ", j, ") is out of range for a table of ", num,
                " rows");
}

void embedding_forward(KernelArgs& a) {
  const Tensor& w = a.inputs[0];
  const Tensor& index = a.inputs[1];
  const Tensor& out = a.outputs[0];
  const int64_t num = w.size(0), dim = w.size(1), m = index.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  check_indices(idx, m, num);
  const size_t row_bytes = static_cast<size_t>(dim) * w.element_size();
  const char* src = static_cast<const char*>(w.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for(m, std::max<int64_t>(1, 65536 / std::max<int64_t>(dim, 1)), [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) std::memcpy(dst + j * row_bytes, src + idx[j] * row_bytes, row_bytes);
  });
}

void embedding_backward(KernelArgs& a) {
  const Tensor& g = a.inputs[0];
  const Tensor& index = a.inputs[1];
  const Tensor& gw = a.outputs[0];
  const int64_t padding_idx = static_cast<const EmbeddingAttrs*>(a.attrs)->padding_idx;
  const int64_t num = gw.size(0), dim = gw.size(1), m = index.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  check_indices(idx, m, num);
  // positions of each table row, in increasing order: start[r] .. start[r + 1] in `pos`
  std::vector<int64_t> start(static_cast<size_t>(num) + 1, 0), pos(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) ++start[idx[j] + 1];
  for (int64_t r = 0; r < num; ++r) start[r + 1] += start[r];
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t j = 0; j < m; ++j) pos[fill[idx[j]]++] = j;
  }
  visit_float_dtype(gw.dtype(), "embedding_backward", [&]<class T>() {
    using A = compute_t<T>;
    const T* gp = static_cast<const T*>(g.data_ptr());
    T* out = static_cast<T*>(gw.data_ptr());
    parallel_for(num, std::max<int64_t>(1, 16384 / std::max<int64_t>(dim, 1)), [&](int64_t b, int64_t e) {
      std::vector<A> acc(static_cast<size_t>(dim)), part(static_cast<size_t>(dim));
      for (int64_t r = b; r < e; ++r) {
        T* orow = out + r * dim;
        const int64_t s0 = start[r], s1 = start[r + 1];
        if (r == padding_idx || s0 == s1) {
          std::fill_n(orow, dim, T(0));
          continue;
        }
        if (s1 - s0 == 1 && std::is_same_v<T, A>) {
          std::memcpy(orow, gp + pos[s0] * dim, sizeof(T) * dim);
          continue;
        }
        // In segments (embedding_math.h: the GPU's order), each summed from 0 into part.
        std::fill(acc.begin(), acc.end(), A(0));
        const bool segmented = emb::segments(s1 - s0) > 0;
        for (int64_t k0 = s0; k0 < s1; k0 += emb::kEmbeddingSegment) {
          const int64_t k1 = std::min(s1, k0 + emb::kEmbeddingSegment);
          A* sum = segmented ? part.data() : acc.data();
          if (segmented) std::fill(part.begin(), part.end(), A(0));
          for (int64_t s = k0; s < k1; ++s) {
            const T* grow = gp + pos[s] * dim;
            for (int64_t c = 0; c < dim; ++c) sum[c] += static_cast<A>(grow[c]);
          }
          if (segmented)
            for (int64_t c = 0; c < dim; ++c) acc[c] += part[c];
        }
        for (int64_t c = 0; c < dim; ++c) orow[c] = static_cast<T>(acc[c]);
      }
    });
  });
}

constexpr DeviceType kCpu = DeviceType::CPU;
KILN_REGISTER_KERNEL(Op::Embedding, kCpu, embedding_forward);
KILN_REGISTER_KERNEL(Op::EmbeddingBackward, kCpu, embedding_backward);

}  // namespace
}  // namespace kiln::backend::cpu
