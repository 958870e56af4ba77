// NCCL, the GPU transport of kiln::distributed, on the one GPU a check machine has: a communicator
// of one process (its unique id "exchanged" over a host group of one) runs every collective on
// every dtype, queued on a communication stream, and leaves the values as a world of one must.
// Multi-GPU runs wait for a machine with several GPUs; without a GPU (the stand-in device is not
// one) or NCCL this skips.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "distributed/process_group.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

namespace detail = kiln::distributed::detail;
using distributed::ReduceOp;

// A host process group of one: every collective leaves or copies its data.
class LoneGroup final : public detail::ProcessGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string name() const override { return "one process"; }
  void all_reduce(void*, int64_t, detail::Elem, ReduceOp) override {}
  void broadcast(void*, int64_t, int) override { ++broadcasts; }
  void all_gather(const void* in, void* out, int64_t bytes) override {
    std::memcpy(out, in, static_cast<size_t>(bytes));
  }
  void reduce_scatter(const void*, void*, int64_t, detail::Elem, ReduceOp) override {}
  void barrier() override {}
  [[noreturn]] void abort(int) override { std::abort(); }
  void finalize() override {}
  int broadcasts = 0;
};

TEST_F(Cuda, NcclCollectivesOfOneGpuInEveryDtype) {
  if (!detail::nccl_built()) GTEST_SKIP() << "built without NCCL";
  // KILN_TEST_CUDA_STAND_IN=1 (tests/stand_in_run.cpp): its cuda:0 is host memory, not a GPU.
  if (dynamic_cast<HostBackedRuntime*>(find_runtime(DeviceType::CUDA)))
    GTEST_SKIP() << "the stand-in cuda:0 is not a GPU: NCCL needs one";
  LoneGroup host;
  std::unique_ptr<detail::DeviceGroup> group = detail::make_nccl_group(host, 0);
  EXPECT_EQ(host.broadcasts, 1);  // the unique id went out over the host group
  const cuda::Stream stream = cuda::Stream::create(0);
  for (ScalarType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<double> v(37);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 5);
    const Tensor x = tensor(v, kFloat64).to(dt).to(Device::cuda(0));
    const std::vector<double> want = values(x.cpu());
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Average}) {
      if (op == ReduceOp::Average && !is_floating_point(dt)) continue;
      Tensor t = x.clone();
      cuda::synchronize();  // t is written on the current stream; NCCL runs on `stream`
      group->all_reduce(t.data_ptr(), t.numel(), dt, op, stream);
      stream.synchronize();
      EXPECT_EQ(values(t.cpu()), want) << "all_reduce " << static_cast<int>(op);
    }
    Tensor b = x.clone(), gathered = empty_like(x), share = empty_like(x);
    cuda::synchronize();
    group->broadcast(b.data_ptr(), static_cast<int64_t>(b.nbytes()), 0, stream);
    group->all_gather(x.data_ptr(), gathered.data_ptr(), static_cast<int64_t>(x.nbytes()), stream);
    group->reduce_scatter(x.data_ptr(), share.data_ptr(), x.numel(), dt, ReduceOp::Sum, stream);
    stream.synchronize();
    EXPECT_EQ(values(b.cpu()), want) << "broadcast";
    EXPECT_EQ(values(gathered.cpu()), want) << "all_gather";
    EXPECT_EQ(values(share.cpu()), want) << "reduce_scatter";
  }
}

}  // namespace
}  // namespace kiln::test
