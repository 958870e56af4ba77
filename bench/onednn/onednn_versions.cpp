// oneDNN forward-inference micro-benchmark (matmul + NHWC convolution).
// Builds against oneDNN 2.x (op descriptors) and 3.x (no op descriptors).
//
// Usage: ./bench [iters=7] [warmup=2] [reps=1] [filter-substring]
//   Each case: warm-up runs, then `iters` timed runs (each followed by
//   stream.wait()); median per rep; best median over `reps` is reported.
//   Set BENCH_VERBOSE=1 to print the chosen implementation name.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#if defined(_OPENMP)
#include <omp.h>
#endif

using namespace dnnl;
using dt = memory::data_type;
using tag = memory::format_tag;

static int g_iters = 7, g_warmup = 2, g_reps = 1;
static bool g_verbose = false;

// Fill a memory object with a small constant (valid bit pattern for f32/bf16).
static void fill(memory &m) {
    auto md = m.get_desc();
    size_t bytes = md.get_size();
    void *p = m.map_data<void>();
#if DNNL_VERSION_MAJOR >= 3
    const dt d = md.get_data_type();
#else
    const dt d = md.data_type();
#endif
    if (d == dt::f32) {
        float *f = static_cast<float *>(p);
        for (size_t i = 0; i < bytes / 4; ++i) f[i] = 0.01f * (float)(i % 7);
    } else { // bf16: top 16 bits of the f32 value
        uint16_t *h = static_cast<uint16_t *>(p);
        for (size_t i = 0; i < bytes / 2; ++i) {
            float v = 0.01f * (float)(i % 7);
            uint32_t u;
            std::memcpy(&u, &v, 4);
            h[i] = (uint16_t)(u >> 16);
        }
    }
    m.unmap_data(p);
}

static double run_timed(primitive &prim,
        const std::unordered_map<int, memory> &args, stream &s) {
    for (int i = 0; i < g_warmup; ++i) prim.execute(s, args);
    s.wait();
    double best = 1e30;
    for (int r = 0; r < g_reps; ++r) {
        std::vector<double> t;
        for (int i = 0; i < g_iters; ++i) {
            auto t0 = std::chrono::steady_clock::now();
            prim.execute(s, args);
            s.wait();
            auto t1 = std::chrono::steady_clock::now();
            t.push_back(std::chrono::duration<double>(t1 - t0).count());
        }
        std::sort(t.begin(), t.end());
        best = std::min(best, t[t.size() / 2]);
    }
    return best;
}

static const char *dtname(dt d) { return d == dt::f32 ? "f32" : "bf16"; }

static void bench_matmul(engine &eng, stream &s, const char *name,
        memory::dim B, memory::dim M, memory::dim K, memory::dim N, dt d) {
    memory::dims sd, wd, dd;
    tag t;
    if (B > 1) {
        sd = {B, M, K}; wd = {B, K, N}; dd = {B, M, N}; t = tag::abc;
    } else {
        sd = {M, K}; wd = {K, N}; dd = {M, N}; t = tag::ab;
    }
    memory::desc src_md(sd, d, t), wei_md(wd, d, t), dst_md(dd, d, t);
#if DNNL_VERSION_MAJOR >= 3
    matmul::primitive_desc pd(eng, src_md, wei_md, dst_md);
#else
    matmul::desc op(src_md, wei_md, dst_md);
    matmul::primitive_desc pd(op, eng);
#endif
    memory src(pd.src_desc(), eng), wei(pd.weights_desc(), eng),
            dst(pd.dst_desc(), eng);
    fill(src);
    fill(wei);
    matmul prim(pd);
    std::unordered_map<int, memory> args {{DNNL_ARG_SRC, src},
            {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
    double sec = run_timed(prim, args, s);
    double flop = 2.0 * B * M * K * N;
    printf("matmul %-28s %-4s %9.3f ms %9.1f GFLOP/s%s%s\n", name, dtname(d),
            sec * 1e3, flop / sec * 1e-9, g_verbose ? "  impl=" : "",
            g_verbose ? pd.impl_info_str() : "");
    fflush(stdout);
}

static void bench_conv(engine &eng, stream &s, const char *name,
        memory::dim N, memory::dim IC, memory::dim OC, memory::dim H,
        memory::dim W, memory::dim KH, memory::dim KW, memory::dim S,
        memory::dim P, dt d) {
    memory::dim OH = (H + 2 * P - KH) / S + 1, OW = (W + 2 * P - KW) / S + 1;
    memory::desc src_md({N, IC, H, W}, d, tag::nhwc);
    memory::desc wei_md({OC, IC, KH, KW}, d, tag::any);
    memory::desc dst_md({N, OC, OH, OW}, d, tag::nhwc);
    memory::dims strides {S, S}, pad {P, P};
#if DNNL_VERSION_MAJOR >= 3
    convolution_forward::primitive_desc pd(eng, prop_kind::forward_inference,
            algorithm::convolution_direct, src_md, wei_md, dst_md, strides,
            pad, pad);
#else
    convolution_forward::desc op(prop_kind::forward_inference,
            algorithm::convolution_direct, src_md, wei_md, dst_md, strides,
            pad, pad);
    convolution_forward::primitive_desc pd(op, eng);
#endif
    memory src(pd.src_desc(), eng), wei(pd.weights_desc(), eng),
            dst(pd.dst_desc(), eng);
    fill(src);
    fill(wei);
    convolution_forward prim(pd);
    std::unordered_map<int, memory> args {{DNNL_ARG_SRC, src},
            {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
    double sec = run_timed(prim, args, s);
    double flop = 2.0 * N * OH * OW * OC * IC * KH * KW;
    printf("conv   %-28s %-4s %9.3f ms %9.1f GFLOP/s%s%s\n", name, dtname(d),
            sec * 1e3, flop / sec * 1e-9, g_verbose ? "  impl=" : "",
            g_verbose ? pd.impl_info_str() : "");
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc > 1) g_iters = atoi(argv[1]);
    if (argc > 2) g_warmup = atoi(argv[2]);
    if (argc > 3) g_reps = atoi(argv[3]);
    std::string filter = argc > 4 ? argv[4] : "";
    g_verbose = getenv("BENCH_VERBOSE") && atoi(getenv("BENCH_VERBOSE"));

    const dnnl_version_t *v = dnnl_version();
    printf("oneDNN %d.%d.%d (hash %s) cpu_runtime=%u hw_threads=%u", v->major,
            v->minor, v->patch, v->hash, v->cpu_runtime,
            std::thread::hardware_concurrency());
#if defined(_OPENMP)
    printf(" omp_max_threads=%d", omp_get_max_threads());
#endif
    printf(" iters=%d warmup=%d reps=%d\n", g_iters, g_warmup, g_reps);
    fflush(stdout);

    engine eng(engine::kind::cpu, 0);
    stream s(eng);

    auto want = [&](const std::string &n) {
        return filter.empty() || n.find(filter) != std::string::npos;
    };
    for (dt d : {dt::f32, dt::bf16}) {
        struct MM { const char *n; memory::dim B, M, K, N; } mms[] = {
                {"4096x4096x4096", 1, 4096, 4096, 4096},
                {"bert_qkvo_8192x768x768", 1, 8192, 768, 768},
                {"bert_ffn1_8192x768x3072", 1, 8192, 768, 3072},
                {"bert_ffn2_8192x3072x768", 1, 8192, 3072, 768},
                {"attn_768x[128x64x128]", 768, 128, 64, 128}};
        for (auto &m : mms)
            if (want(m.n)) bench_matmul(eng, s, m.n, m.B, m.M, m.K, m.N, d);
        struct CV { const char *n; memory::dim IC, OC, H, KH, S, P; } cvs[] = {
                {"rn50_3x3_64-64_56", 64, 64, 56, 3, 1, 1},
                {"rn50_1x1_256-64_56", 256, 64, 56, 1, 1, 0},
                {"rn50_3x3_256-256_14", 256, 256, 14, 3, 1, 1},
                {"rn50_7x7s2_3-64_224", 3, 64, 224, 7, 2, 3}};
        for (auto &c : cvs)
            if (want(c.n))
                bench_conv(eng, s, c.n, 32, c.IC, c.OC, c.H, c.H, c.KH, c.KH,
                        c.S, c.P, d);
    }
    return 0;
}
