// Fused CUDA scaled_dot_product_attention, forward and backward, with memory linear in the
// sequence length: no L x S score matrix is ever held, only [B, L] row statistics.
//
// When: attention.cu takes this path where use_fused (attention_rows.h) holds: E, Ev <= 128
// (float32 or float64; 16-bit calls on float32 copies) and a single head's scores, counted with
// the backward's buffers, over the composed path's score budget (512 MiB by default: about
// 6700 x 6700 float32 scores with dropout). Everything shorter keeps the composed cuBLASLt path,
// in chunks of heads: its tensor-core products and memory-speed row kernels beat these
// one-thread-per-row loops by far (docs/perf.md), so this path is for memory, not speed.
//
// How: one thread per query row keeps its q row and its output accumulator in local arrays and
// runs the online softmax (attention_rows.h's online_keys) over key tiles the block loads into
// shared memory. Backward recomputes the scores from q, k and the saved logsumexp in two
// kernels, each output row with one writer (no atomics): one thread per query row for dQ (it
// also writes D_i = dO_i . O_i), then one thread per key row for dK and dV over query tiles.
// The per-score math is attention_rows.h's, which the CPU tests run over whole rows.
#include "backend/cuda/attention_rows.h"
#include "backend/cuda/device/common.cuh"
#include "core/device_runtime.h"

namespace kiln::backend::cuda {
namespace {

unsigned unit_grid(int64_t units) { return static_cast<unsigned>(std::clamp<int64_t>(units, 1, int64_t{1} << 20)); }

// Runs `launch` (a kernel launch and its check). These kernels' local arrays (up to 4 KiB a thread
// for float64) take the driver 0.3-1 GiB at a kernel's first launch, outside the caching
// allocator, on the path taken when memory is short: where the driver has no room for them, the
// allocator's cache goes back to it and the launch is tried once more (then OutOfMemoryError).
template <class Launch>
void launch_with_room(const Tensor& on, Launch&& launch) {
  try {
    launch();
  } catch (const OutOfMemoryError&) {
    find_runtime(DeviceType::CUDA)->empty_cache(on.device().index);
    launch();
  }
}

// Rows [0, n) of width w (row stride rs) into dst[n][w], by the whole block.
template <class T>
__device__ void load_rows(T* dst, const T* src, int64_t rs, int64_t n, int64_t w) {
  for (int64_t x = threadIdx.x; x < n * w; x += blockDim.x) dst[x] = src[(x / w) * rs + x % w];
}

template <class T>
__device__ T* shared_tiles() {
  extern __shared__ __align__(16) unsigned char smem[];
  return reinterpret_cast<T*>(smem);
}

// The forward: block unit u is batch u / qblocks, query rows [i0, i0 + kBlockRows).
template <class T>
__global__ void __launch_bounds__(kBlockRows) forward_kernel(Problem<T> P, T* out, T* lse) {
  const Rows& R = P.R;
  T* ks = shared_tiles<T>();
  T* vs = ks + kTileRows<T> * P.E;
  const int64_t qblocks = (R.L + kBlockRows - 1) / kBlockRows, units = P.Bt * qblocks;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {  // the same for the whole block
    const int64_t b = u / qblocks, i0 = (u % qblocks) * kBlockRows, i = i0 + threadIdx.x;
    const bool active = i < R.L;
    T q[kMaxHead];
    OnlineRow<T> st;
    st.init(P.Ev);
    int64_t moff = 0;
    if (active) {
      const T* qr = P.q.row(b, i);
      for (int64_t e = 0; e < P.E; ++e) q[e] = qr[e];
      if (R.mask.base) moff = R.mask.row_offset(b, i);
    }
    const int64_t kend = R.key_end(i0);
    for (int64_t j0 = 0; j0 < kend; j0 += kTileRows<T>) {
      const int64_t nk = std::min<int64_t>(kTileRows<T>, kend - j0);
      __syncthreads();  // the previous tile is consumed
      load_rows(ks, P.k.row(b, j0), P.k.rs, nk, P.E);
      load_rows(vs, P.v.row(b, j0), P.v.rs, nk, P.Ev);
      __syncthreads();
      if (active) online_keys(R, b, i, moff, q, P.E, P.Ev, KeyRows<T>{ks, vs, P.E, P.Ev, j0, nk}, st);
    }
    if (active) finish_row(st, P.Ev, out + (b * R.L + i) * P.Ev, lse + b * R.L + i);
  }
}

// What backward reads and writes besides q, k, v: out and lse (contiguous, from forward), dO
// batched, D [Bt, L] (written by dq_kernel), the contiguous gradients.
template <class T>
struct Grads {
  const T *out, *lse;
  Mat<T> go;
  T* D;
  T *gq, *gk, *gv;
};

// dQ and D, one thread per query row, over key tiles.
template <class T>
__global__ void __launch_bounds__(kBlockRows) dq_kernel(Problem<T> P, Grads<T> G) {
  const Rows& R = P.R;
  T* ks = shared_tiles<T>();
  T* vs = ks + kTileRows<T> * P.E;
  const int64_t qblocks = (R.L + kBlockRows - 1) / kBlockRows, units = P.Bt * qblocks;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t b = u / qblocks, i0 = (u % qblocks) * kBlockRows, i = i0 + threadIdx.x, row = b * R.L + i;
    const bool active = i < R.L;
    T q[kMaxHead], go[kMaxHead], dq[kMaxHead];
    T lse = 0, D = 0;
    int64_t moff = 0;
    if (active) {
      const T *qr = P.q.row(b, i), *gr = G.go.row(b, i);
      for (int64_t e = 0; e < P.E; ++e) q[e] = qr[e], dq[e] = 0;
      for (int64_t e = 0; e < P.Ev; ++e) go[e] = gr[e];
      if (R.mask.base) moff = R.mask.row_offset(b, i);
      lse = G.lse[row];
      D = G.D[row] = row_D(go, G.out + row * P.Ev, P.Ev);
    }
    const int64_t kend = R.key_end(i0);
    for (int64_t j0 = 0; j0 < kend; j0 += kTileRows<T>) {
      const int64_t nk = std::min<int64_t>(kTileRows<T>, kend - j0);
      __syncthreads();
      load_rows(ks, P.k.row(b, j0), P.k.rs, nk, P.E);
      load_rows(vs, P.v.row(b, j0), P.v.rs, nk, P.Ev);
      __syncthreads();
      if (active) query_row_grad(R, b, i, moff, q, go, lse, D, P.E, P.Ev, KeyRows<T>{ks, vs, P.E, P.Ev, j0, nk}, dq);
    }
    if (active) scale_row(dq, P.E, R.scale, G.gq + row * P.E);
  }
}

// dK and dV, one thread per key row, over query tiles (q, dO, lse, D and mask offsets shared).
template <class T>
__global__ void __launch_bounds__(kBlockRows) dkv_kernel(Problem<T> P, Grads<T> G) {
  const Rows& R = P.R;
  constexpr int kT = kTileRows<T>;
  T* qs = shared_tiles<T>();
  T* gos = qs + kT * P.E;
  T* lses = gos + kT * P.Ev;
  T* Ds = lses + kT;
  int64_t* moffs = reinterpret_cast<int64_t*>(Ds + kT);  // 8-byte aligned: kT is even
  const int64_t kblocks = (R.S + kBlockRows - 1) / kBlockRows, units = P.Bt * kblocks;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t b = u / kblocks, jb = (u % kblocks) * kBlockRows, j = jb + threadIdx.x;
    const bool active = j < R.S;
    T k[kMaxHead], v[kMaxHead], dk[kMaxHead], dv[kMaxHead];
    if (active) {
      const T *kr = P.k.row(b, j), *vr = P.v.row(b, j);
      for (int64_t e = 0; e < P.E; ++e) k[e] = kr[e], dk[e] = 0;
      for (int64_t e = 0; e < P.Ev; ++e) v[e] = vr[e], dv[e] = 0;
    }
    for (int64_t i0 = R.query_begin(jb); i0 < R.L; i0 += kT) {
      const int64_t nq = std::min<int64_t>(kT, R.L - i0);
      __syncthreads();
      load_rows(qs, P.q.row(b, i0), P.q.rs, nq, P.E);
      load_rows(gos, G.go.row(b, i0), G.go.rs, nq, P.Ev);
      for (int64_t t = threadIdx.x; t < nq; t += blockDim.x) {
        lses[t] = G.lse[b * R.L + i0 + t], Ds[t] = G.D[b * R.L + i0 + t];
        moffs[t] = R.mask.base ? R.mask.row_offset(b, i0 + t) : 0;
      }
      __syncthreads();
      if (active)
        key_row_grads(R, b, j, k, v, P.E, P.Ev, QueryRows<T>{qs, gos, lses, Ds, moffs, P.E, P.Ev, i0, nq}, dk, dv);
    }
    if (active) {
      scale_row(dk, P.E, R.scale, G.gk + (b * R.S + j) * P.E);
      scale_row(dv, P.Ev, 1.0, G.gv + (b * R.S + j) * P.Ev);
    }
  }
}

template <class T>
void forward_t(KernelArgs& a) {
  const auto& at = *static_cast<const AttentionAttrs*>(a.attrs);
  Tensor keep[3];
  const Problem<T> P = make_problem<T>(at, a.inputs, keep);
  const int64_t units = P.Bt * ((P.R.L + kBlockRows - 1) / kBlockRows);
  if (units == 0) return;
  const size_t smem = static_cast<size_t>(kTileRows<T> * (P.E + P.Ev)) * sizeof(T);
  launch_with_room(a.outputs[0], [&] {
    forward_kernel<T><<<unit_grid(units), kBlockRows, smem, stream_of(a)>>>(P, a.outputs[0].data_ptr<T>(),
                                                                            a.outputs[1].data_ptr<T>());
    KILN_CUDA_LAUNCHED("scaled_dot_product_attention fused forward");
  });
}

template <class T>
void backward_t(KernelArgs& a) {
  const auto& at = *static_cast<const AttentionAttrs*>(a.attrs);
  Tensor keep[3];
  const Problem<T> P = make_problem<T>(at, a.inputs, keep);
  const size_t base = at.has_mask ? 4 : 3;
  const Tensor &out = a.inputs[base], &lse = a.inputs[base + 1];
  const Tensor go3 = batched(a.inputs[base + 2], P.Bt);
  const int64_t L = P.R.L, S = P.R.S;
  const Tensor D = make_empty({P.Bt * L}, out.dtype(), out.device());
  const Grads<T> G{out.data_ptr<T>(), lse.data_ptr<T>(), mat_of<T>(go3), D.data_ptr<T>(),
                   a.outputs[0].data_ptr<T>(), a.outputs[1].data_ptr<T>(), a.outputs[2].data_ptr<T>()};
  cudaStream_t stream = stream_of(a);
  const size_t tiles = static_cast<size_t>(kTileRows<T> * (P.E + P.Ev)) * sizeof(T);
  const int64_t qunits = P.Bt * ((L + kBlockRows - 1) / kBlockRows), kunits = P.Bt * ((S + kBlockRows - 1) / kBlockRows);
  if (qunits > 0) {  // first: dkv_kernel reads the D it writes
    launch_with_room(D, [&] {
      dq_kernel<T><<<unit_grid(qunits), kBlockRows, tiles, stream>>>(P, G);
      KILN_CUDA_LAUNCHED("scaled_dot_product_attention fused backward dq");
    });
  }
  if (kunits > 0) {
    const size_t smem = tiles + kTileRows<T> * (2 * sizeof(T) + sizeof(int64_t));
    launch_with_room(D, [&] {
      dkv_kernel<T><<<unit_grid(kunits), kBlockRows, smem, stream>>>(P, G);
      KILN_CUDA_LAUNCHED("scaled_dot_product_attention fused backward dk dv");
    });
  }
}

}  // namespace

void fused_attention_forward(KernelArgs& a) {
  if (a.inputs[0].dtype() == kFloat64) return forward_t<double>(a);
  forward_t<float>(a);
}

void fused_attention_backward(KernelArgs& a) {
  if (a.inputs[0].dtype() == kFloat64) return backward_t<double>(a);
  backward_t<float>(a);
}

}  // namespace kiln::backend::cuda
