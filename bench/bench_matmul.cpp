// float32 matmul through Kiln against the same product in oneDNN called directly.
#include <benchmark/benchmark.h>

#include "kiln/kiln.h"

#ifdef KILN_BENCH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

void set_flops(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}

void BM_KilnMatmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  kiln::manual_seed(0);
  kiln::Tensor a = kiln::randn({n, n}), b = kiln::randn({n, n});
  for (auto _ : state) {
    kiln::Tensor c = kiln::matmul(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_flops(state, n, n, n);
}

// BERT-base's linear layers: [64*128, 768] @ [768, 3072].
void BM_KilnLinearBert(benchmark::State& state) {
  kiln::manual_seed(0);
  kiln::Tensor x = kiln::randn({64, 128, 768}), w = kiln::randn({768, 3072});
  for (auto _ : state) {
    kiln::Tensor y = kiln::matmul(x, w);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  set_flops(state, 64 * 128, 3072, 768);
}

#ifdef KILN_BENCH_ONEDNN
void BM_OnednnMatmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  dnnl::memory::desc md({n, n}, dt::f32, tag::ab);
#if DNNL_VERSION_MAJOR >= 3
  dnnl::matmul::primitive_desc pd(eng, md, md, md);
#else
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), eng);
#endif
  dnnl::matmul prim(pd);
  dnnl::memory a(md, eng), b(md, eng), c(md, eng);
  for (float* p : {static_cast<float*>(a.get_data_handle()), static_cast<float*>(b.get_data_handle())})
    for (int64_t i = 0; i < n * n; ++i) p[i] = static_cast<float>((i % 17) - 8) / 8.f;
  for (auto _ : state) {
    prim.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    s.wait();
  }
  set_flops(state, n, n, n);
}
BENCHMARK(BM_OnednnMatmul)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

}  // namespace

BENCHMARK(BM_KilnMatmul)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_KilnLinearBert)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
