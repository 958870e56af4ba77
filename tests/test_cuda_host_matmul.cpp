// The integer matrix product of the CUDA backend (epilogue.cu; cuBLASLt has none), run on the
// CPU: integer_gemm_element over every output element of strided, transposed and batch-broadcast
// operands gives the CPU's matmul, overflow wrapping as there.
#include "backend/cuda/integer_gemm.h"
#include "cuda_host_test_util.h"

using namespace kiln::test::cuda_host;

namespace {
template <class T>
void check_integer_gemm(const Tensor& a, const Tensor& w, const std::string& what) {
  const Tensor want = matmul(a, w);                                                            // the CPU op: [B, M, N]
  Tensor out = full(want.shape(), 7, a.dtype()).transpose(1, 2).contiguous().transpose(1, 2);  // a strided output
  const kc::IntGemmGeom g = kc::integer_gemm_geom(a, w, out);
  for (int64_t i = 0; i < out.numel(); ++i)
    kc::integer_gemm_element(a.data_ptr<T>(), w.data_ptr<T>(), out.data_ptr<T>(), g, i);
  EXPECT_EQ(test::values(out), test::values(want)) << what;
}
}  // namespace

TEST(CudaHostMath, IntegerProductsMatchTheCpu) {
  for (ScalarType dt : {kInt64, kInt32, kUInt8}) {
    SCOPED_TRACE(dtype_name(dt));
    // Values in [-5, 5] and [-6, 6] (unsigned: [0, 10] and [0, 12]) from a formula.
    auto make = [dt](Shape shape, int64_t mod) {
      std::vector<int64_t> v(static_cast<size_t>(shape_numel(shape)));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i * 7 + 3) % mod - (dt == kUInt8 ? 0 : mod / 2);
      return tensor(v).reshape(shape).to(dt);
    };
    const Tensor a = make({2, 5, 7}, 11), w = make({2, 7, 3}, 13);
    auto run = [&]<class T>() {
      check_integer_gemm<T>(a, w, "dense");
      check_integer_gemm<T>(a.transpose(1, 2).contiguous().transpose(1, 2),
                            w.transpose(1, 2).contiguous().transpose(1, 2), "column-major operands");
      check_integer_gemm<T>(a.narrow(0, 0, 1), w, "a broadcast over the batch");
      check_integer_gemm<T>(a, w.narrow(0, 1, 1), "w broadcast over the batch");
      check_integer_gemm<T>(a.narrow(2, 1, 3), w.narrow(1, 2, 3), "sliced K");
    };
    if (dt == kInt64) run.template operator()<int64_t>();
    if (dt == kInt32) run.template operator()<int32_t>();
    if (dt == kUInt8) run.template operator()<uint8_t>();  // sums past 255 wrap, as the CPU's cast
  }
}
