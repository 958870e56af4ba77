// CPU kernels for copy/convert, fill, clamp, where, triangular masks, number generation and dropout.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/loops.h"
#include "backend/cpu/philox_lanes.h"
#include "backend/dispatch.h"
#include "backend/dropout_math.h"
#include "backend/math.h"
#include "core/philox.h"

namespace kiln::backend::cpu {
namespace {

// A copy whose output runs along one dim and whose input along another (a transpose; NCHW to
// channels-last and back). The elementwise loop reads the input one element per cache line along
// the output's run; while the run is short (at most kShortRun elements: channels-last of up to 512
// channels) those lines stay in L1 for the next run and the loop is as fast as this one. Longer
// runs (channels-last to NCHW: a run is H x W) go in tiles of kTile x kTile elements, through a
// buffer. False (nothing done) for any other copy.
template <class To, class Ti, class F>
bool copy_transposed(const Tensor& out, const Tensor& in, F f) {
  constexpr int64_t kTile = 16, kShortRun = 512;
  // Most copies (casts, broadcasts of small tensors) are decided here, without a plan of their own
  // besides the elementwise loop's.
  if (out.numel() <= kShortRun || out.strides() == in.strides()) return false;
  const LoopPlan<2> p = make_plan<2>({&out, &in});
  if (p.ndim < 2) return false;
  const int last = p.ndim - 1;
  if (p.strides[last][0] != static_cast<int64_t>(sizeof(To)) ||
      p.strides[last][1] == static_cast<int64_t>(sizeof(Ti)) || p.sizes[last] <= kShortRun)
    return false;
  int rows = -1;  // the dim along which the input is contiguous
  for (int d = 0; d < last; ++d)
    if (p.strides[d][1] == static_cast<int64_t>(sizeof(Ti))) rows = d;
  if (rows < 0) return false;
  int other[kMaxLoopDims];
  int n_other = 0;
  int64_t outer = 1;
  for (int d = 0; d < last; ++d)
    if (d != rows) other[n_other++] = d, outer *= p.sizes[d];
  const int64_t R = p.sizes[rows], C = p.sizes[last], row_tiles = (R + kTile - 1) / kTile;
  const int64_t out_row = p.strides[rows][0], in_col = p.strides[last][1];  // bytes
  parallel_for(outer * row_tiles, std::max<int64_t>(1, kElementwiseGrain / (kTile * C)), [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      char* po = p.base[0];
      const char* pi = p.base[1];
      for (int64_t k = n_other - 1, o = u / row_tiles; k >= 0; --k) {
        const int d = other[k];
        po += o % p.sizes[d] * p.strides[d][0];
        pi += o % p.sizes[d] * p.strides[d][1];
        o /= p.sizes[d];
      }
      const int64_t r0 = u % row_tiles * kTile, nr = std::min(R - r0, kTile);
      for (int64_t c0 = 0; c0 < C; c0 += kTile) {
        const int64_t nc = std::min(C - c0, kTile);
        // The tile's input columns into a buffer (contiguous reads), then its output rows out of
        // it (contiguous writes; the buffer's columns are in L1).
        compute_t<Ti> tile[kTile][kTile];
        for (int64_t c = 0; c < nc; ++c) {
          const Ti* src = reinterpret_cast<const Ti*>(pi + (c0 + c) * in_col) + r0;
          if (nr == kTile) {  // a whole column: a fixed count, unrolled (not a call to memcpy)
            for (int64_t r = 0; r < kTile; ++r) tile[c][r] = static_cast<compute_t<Ti>>(src[r]);
          } else {
            for (int64_t r = 0; r < nr; ++r) tile[c][r] = static_cast<compute_t<Ti>>(src[r]);
          }
        }
        for (int64_t r = 0; r < nr; ++r) {
          To* dst = reinterpret_cast<To*>(po + (r0 + r) * out_row) + c0;
          if (nc == kTile) {
            for (int64_t c = 0; c < kTile; ++c) dst[c] = static_cast<To>(f(tile[c][r]));
          } else {
            for (int64_t c = 0; c < nc; ++c) dst[c] = static_cast<To>(f(tile[c][r]));
          }
        }
      }
    }
  });
  return true;
}

// out = in (broadcast), converting the dtype.
void copy(KernelArgs& a) {
  const Tensor& in = a.inputs[0];
  const Tensor& out = a.outputs[0];
  visit_dtype(out.dtype(), "copy", [&]<class To>() {
    visit_dtype(in.dtype(), "copy", [&]<class Ti>() {
      if constexpr (std::is_same_v<To, bool>) {
        unary_loop<To, Ti>(out, in, [](auto x) { return x != decltype(x)(0); });
      } else if constexpr (std::is_integral_v<To> && !std::is_integral_v<compute_t<Ti>>) {
        // Float to integer outside the integer's range is undefined in C++: go through int64
        // (clamped, NaN as 0) and wrap from there. For uint8 that is what PyTorch gives on x86
        // (300.0 -> 44); for int32 PyTorch's x86 conversion gives INT32_MIN out of range and for
        // NaN (3e9 -> -2^31 there, -1294967296 here): undefined in both, so not matched.
        unary_loop<To, Ti>(out, in, [](auto x) {
          constexpr double kLimit = 9.2233720368547748e18;  // just below 2^63
          double d = static_cast<double>(x);
          int64_t i = d != d ? 0 : d >= kLimit ? INT64_MAX : d <= -kLimit ? INT64_MIN : static_cast<int64_t>(d);
          return static_cast<To>(i);
        });
      } else if constexpr (std::is_same_v<To, Ti> && sizeof(To) == 2 && !std::is_integral_v<To>) {
        // A 16-bit float to its own dtype as bits: through float a NaN loses its sign and payload.
        auto same = [](auto x) { return x; };
        if (!copy_transposed<uint16_t, uint16_t>(out, in, same)) unary_loop<uint16_t, uint16_t>(out, in, same);
      } else {
        auto same = [](auto x) { return x; };
        if (!copy_transposed<To, Ti>(out, in, same)) unary_loop<To, Ti>(out, in, same);
      }
    });
  });
}

void fill(KernelArgs& a) {
  const Tensor& out = a.outputs[0];
  const Scalar v = static_cast<const ScalarAttrs*>(a.attrs)->value;
  visit_dtype(out.dtype(), "fill", [&]<class T>() {
    const T value = v.to<T>();
    auto plan = make_plan<1>({&out});
    run_plan(plan, [&](char** p, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(T)) {
        T* o = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = value;
      } else {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = value;
      }
    });
  });
}

void clamp(KernelArgs& a) {
  const auto& c = *static_cast<const ClampAttrs*>(a.attrs);
  visit_dtype(a.inputs[0].dtype(), "clamp", [&]<class T>() {
    using C = compute_t<T>;
    const C lo = c.lo<C>(), hi = c.hi<C>();
    unary_loop<T, T>(a.outputs[0], a.inputs[0],
                     [=](C x) { return math::clamp<C>(x, c.has_min, lo, c.has_max, hi); });
  });
}

// A run of where with the condition and output dense, each value operand dense (kX, kY) or one
// broadcast element (masked_fill's value): compiled for each instruction set, a select per vector.
template <class T, bool kX, bool kY>
KILN_VECTORIZE void where_run(T* __restrict o, const bool* __restrict c, const T* __restrict x, const T* __restrict y,
                              int64_t n) {
  // Bit masks from the bools: GCC 12 turns `c[i] ? x : y` into a branch per element, which a
  // random mask mispredicts half the time (7.8 ms for 4M floats, 8x an add).
  using U = std::conditional_t<
      sizeof(T) == 1, uint8_t,
      std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
  static_assert(sizeof(U) == sizeof(T));
  for (int64_t i = 0; i < n; ++i) {
    const U m = static_cast<U>(U(0) - static_cast<U>(c[i]));  // all ones where c[i]
    const U xb = std::bit_cast<U>(x[kX ? i : 0]), yb = std::bit_cast<U>(y[kY ? i : 0]);
    o[i] = std::bit_cast<T>(static_cast<U>((xb & m) | (yb & static_cast<U>(~m))));
  }
}

// out = cond ? x : y, all broadcast to out.
void where(KernelArgs& a) {
  const Tensor& out = a.outputs[0];
  visit_dtype(out.dtype(), "where", [&]<class T>() {
    auto plan = make_plan<4>({&out, &a.inputs[0], &a.inputs[1], &a.inputs[2]});
    run_plan(plan, [&](char** p, const int64_t* s, int64_t n) {
      constexpr int64_t e = sizeof(T);
      if (s[0] == e && s[1] == sizeof(bool) && (s[2] == e || s[2] == 0) && (s[3] == e || s[3] == 0)) {
        auto* o = reinterpret_cast<T*>(p[0]);
        const auto* c = reinterpret_cast<const bool*>(p[1]);
        const auto *x = reinterpret_cast<const T*>(p[2]), *y = reinterpret_cast<const T*>(p[3]);
        if (s[2] && s[3])
          where_run<T, true, true>(o, c, x, y, n);
        else if (s[2])
          where_run<T, true, false>(o, c, x, y, n);
        else if (s[3])
          where_run<T, false, true>(o, c, x, y, n);
        else
          where_run<T, false, false>(o, c, x, y, n);
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
        *reinterpret_cast<T*>(p[0] + i * s[0]) = c ? *reinterpret_cast<const T*>(p[2] + i * s[2])
                                                   : *reinterpret_cast<const T*>(p[3] + i * s[3]);
      }
    });
  });
}

// Zeroes the part of each trailing [rows, cols] matrix above (tril) or below (triu) the diagonal.
template <bool kUpper>
void triangle(KernelArgs& a) {
  const Tensor& in = a.inputs[0];  // contiguous
  const Tensor& out = a.outputs[0];
  const int64_t k = static_cast<const TriAttrs*>(a.attrs)->diagonal;
  const int64_t rows = in.size(-2), cols = in.size(-1);
  const int64_t mats = rows * cols == 0 ? 0 : in.numel() / (rows * cols);
  visit_dtype(in.dtype(), "tril", [&]<class T>() {
    const T* src = static_cast<const T*>(in.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    parallel_for(mats * rows, 4096 / std::max<int64_t>(cols, 1) + 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t i = r % rows;
        for (int64_t j = 0; j < cols; ++j) {
          bool keep = kUpper ? (j - i >= k) : (j - i <= k);
          dst[r * cols + j] = keep ? src[r * cols + j] : T(0);
        }
      }
    });
  });
}

// out[i] = start + i * step, out contiguous.
void arange(KernelArgs& a) {
  const auto& r = *static_cast<const ArangeAttrs*>(a.attrs);
  const Tensor& out = a.outputs[0];
  visit_dtype(out.dtype(), "arange", [&]<class T>() {
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(out.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
      if (r.integral)  // unsigned arithmetic: the op layer checked that the last value fits int64
        for (int64_t i = b; i < e; ++i)
          o[i] = static_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(r.istart) +
                                                     static_cast<uint64_t>(i) * static_cast<uint64_t>(r.istep)));
      else
        for (int64_t i = b; i < e; ++i) o[i] = static_cast<T>(r.start + static_cast<double>(i) * r.step);
    });
  });
}

// Counters [c0, c1) of a draw of n elements, kPer elements a counter, sixteen counters at a time:
// block(words, i0, i1) gets counters c .. c + 15's 64 words (philox16, in vector registers: word
// k of counter c + j is words[4 j + k]) and the elements [i0, i1) they cover, i0 = kPer c. Both
// this and block are inlined into the caller, a loop compiled per instruction set.
#define KILN_VEC_INLINE_LAMBDA __attribute__((always_inline))

template <int kPer, class Block>
KILN_VEC_INLINE void counter_blocks(uint64_t seed, uint64_t offset, int64_t n, int64_t c0, int64_t c1,
                                    const Block& block) {
  uint32_t words[64];
  for (int64_t c = c0; c < c1; c += 16) {
    philox16(seed, offset + static_cast<uint64_t>(c), words);
    block(words, kPer * c, std::min(n, kPer * std::min(c + 16, c1)));
  }
}

// Random kernels: out contiguous; element i uses Philox word i of the reserved counters (two
// words for randint). fill(words, vals) turns a block's 64 words into its 16 * kPer values (of
// type V: double, or int64_t for randint), in order, compiled per instruction set so that fill's
// loops vectorise (in the kernel's lambda they ran as baseline x86-64 code).
template <int kPer, class V, class T, class Fill>
KILN_VECTORIZE void generate_counters(uint64_t seed, uint64_t offset, T* __restrict o, int64_t n, int64_t c0,
                                      int64_t c1, const Fill& fill) {
  V vals[16 * kPer];
  counter_blocks<kPer>(seed, offset, n, c0, c1, [&](const uint32_t* words, int64_t i0, int64_t i1) KILN_VEC_INLINE_LAMBDA {
    fill(words, vals);
    for (int64_t i = i0; i < i1; ++i) o[i] = static_cast<T>(vals[i - i0]);
  });
}

template <int kPer, class V = double, class Fill>
void generate(KernelArgs& a, uint64_t seed, uint64_t offset, const Fill& fill) {
  const Tensor& out = a.outputs[0];
  const int64_t n = out.numel(), counters = (n + kPer - 1) / kPer;
  visit_dtype(out.dtype(), "random", [&]<class T>() {
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(counters, 1024, [&](int64_t b, int64_t e) { generate_counters<kPer, V>(seed, offset, o, n, b, e, fill); });
  });
}

void uniform(KernelArgs& a) {
  const auto& r = *static_cast<const RandomAttrs*>(a.attrs);
  // The 16-bit floats get only as many random bits as they hold (as in PyTorch): 24 would make
  // rand() round up to exactly 1 in about 1 draw in 500.
  const ScalarType t = a.outputs[0].dtype();
  const int bits = t == kBFloat16 ? 8 : t == kFloat16 ? 11 : 24;
  const double lo = r.a, hi = r.b;
  generate<4>(a, r.seed, r.offset, [=](const uint32_t* w, double* v) KILN_VEC_INLINE_LAMBDA {
    for (int j = 0; j < 64; ++j) {
      const double u = lo + (hi - lo) * philox::uniform01(w[j], bits);
      v[j] = u < hi ? u : lo;  // rounding must not reach the open upper end
    }
  });
}

void normal(KernelArgs& a) {
  const auto& r = *static_cast<const RandomAttrs*>(a.attrs);
  const double mean = r.a, std = r.b;
  generate<4>(a, r.seed, r.offset, [=](const uint32_t* w, double* v) KILN_VEC_INLINE_LAMBDA {
    for (int pair = 0; pair < 32; ++pair) {
      double z0, z1;
      philox::box_muller(w[2 * pair], w[2 * pair + 1], &z0, &z1);
      v[2 * pair] = mean + std * z0;
      v[2 * pair + 1] = mean + std * z1;
    }
  });
}

void randint(KernelArgs& a) {
  const auto& r = *static_cast<const RandomAttrs*>(a.attrs);
  const auto low = static_cast<uint64_t>(r.low);
  const uint64_t range = r.range;
  generate<2, int64_t>(a, r.seed, r.offset, [=](const uint32_t* w, int64_t* v) KILN_VEC_INLINE_LAMBDA {
    // Two words give 64 random bits; the multiply-shift maps them to [0, range); the sum wraps
    // as two's complement (unsigned), to [low, low + range).
    for (int j = 0; j < 32; ++j) {
      const uint64_t bits = (static_cast<uint64_t>(w[2 * j]) << 32) | w[2 * j + 1];
      v[j] = static_cast<int64_t>(low + static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * range) >> 64));
    }
  });
}

// Dropout over counters [c0, c1): elements 4c .. 4c + 3 (below n) of counter c take its four
// words (dropout_math.h's rule).
template <class T, class S>
KILN_VECTORIZE void dropout_counters(uint64_t seed, uint64_t offset, uint32_t threshold, S scale, const T* __restrict x,
                                     T* __restrict y, bool* __restrict keep, int64_t n, int64_t c0, int64_t c1) {
  counter_blocks<4>(seed, offset, n, c0, c1, [&](const uint32_t* words, int64_t i0, int64_t i1) KILN_VEC_INLINE_LAMBDA {
    for (int64_t i = i0; i < i1; ++i) {
      keep[i] = dropout_math::kept(words[i - i0], threshold);
      y[i] = dropout_math::apply(x[i], keep[i], scale);
    }
  });
}

// y = x * scale where kept, keep = the mask (dropout_math.h), all contiguous: one pass, each
// Philox counter's four words computed once.
void dropout(KernelArgs& a) {
  const auto& d = *static_cast<const DropoutAttrs*>(a.attrs);
  const Tensor& x = a.inputs[0];
  const int64_t n = x.numel();
  const uint32_t threshold = dropout_math::keep_threshold(d.p);
  bool* keep = static_cast<bool*>(a.outputs[1].data_ptr());
  visit_float_dtype(x.dtype(), "dropout", [&]<class T>() {
    const T* xi = static_cast<const T*>(x.data_ptr());
    T* y = static_cast<T*>(a.outputs[0].data_ptr());
    const auto scale = static_cast<compute_t<T>>(dropout_math::keep_scale(d.p));
    parallel_for((n + 3) / 4, 1024, [&](int64_t b, int64_t e) {
      dropout_counters(d.seed, d.offset, threshold, scale, xi, y, keep, n, b, e);
    });
  });
}

// o = g * scale where kept, over [b, e), compiled per instruction set, the mask read as bytes (g++
// vectorises no load of bool here): in the kernel's lambda it ran scalar, 1.96 ms for 3M floats.
template <class T, class S>
KILN_VECTORIZE void dropout_scale(const T* __restrict g, const bool* keep, S scale, T* __restrict o, int64_t b,
                                  int64_t e) {
  const auto* __restrict k = reinterpret_cast<const uint8_t*>(keep);
  for (int64_t i = b; i < e; ++i) o[i] = dropout_math::apply(g[i], k[i] != 0, scale);
}

void dropout_backward(KernelArgs& a) {
  const auto& d = *static_cast<const DropoutAttrs*>(a.attrs);
  const Tensor& g = a.inputs[0];
  const bool* keep = static_cast<const bool*>(a.inputs[1].data_ptr());
  visit_float_dtype(g.dtype(), "dropout_backward", [&]<class T>() {
    const T* gi = static_cast<const T*>(g.data_ptr());
    T* o = static_cast<T*>(a.outputs[0].data_ptr());
    const auto scale = static_cast<compute_t<T>>(dropout_math::keep_scale(d.p));
    parallel_for(g.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) { dropout_scale(gi, keep, scale, o, b, e); });
  });
}

constexpr DeviceType kCpu = DeviceType::CPU;
KILN_REGISTER_KERNEL(Op::Copy, kCpu, copy);
KILN_REGISTER_KERNEL(Op::Fill, kCpu, fill);
KILN_REGISTER_KERNEL(Op::Clamp, kCpu, clamp);
KILN_REGISTER_KERNEL(Op::Where, kCpu, where);
KILN_REGISTER_KERNEL(Op::Tril, kCpu, triangle<false>);
KILN_REGISTER_KERNEL(Op::Triu, kCpu, triangle<true>);
KILN_REGISTER_KERNEL(Op::Arange, kCpu, arange);
KILN_REGISTER_KERNEL(Op::Uniform, kCpu, uniform);
KILN_REGISTER_KERNEL(Op::Normal, kCpu, normal);
KILN_REGISTER_KERNEL(Op::RandInt, kCpu, randint);
KILN_REGISTER_KERNEL(Op::Dropout, kCpu, dropout);
KILN_REGISTER_KERNEL(Op::DropoutBackward, kCpu, dropout_backward);

}  // namespace
}  // namespace kiln::backend::cpu
