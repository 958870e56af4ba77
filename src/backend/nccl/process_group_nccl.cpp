// kiln::distributed's GPU transport: one NCCL communicator per GPU, its unique id sent from rank 0
// over the MPI group, collectives queued on the communication stream, every call checked.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "distributed/process_group.h"
#include "kiln/error.h"

namespace kiln::distributed::detail {
namespace {

#define KILN_NCCL_CHECK(expr)                                                                        \
  do {                                                                                               \
    const ncclResult_t kiln_nccl_rc = (expr);                                                        \
    if (kiln_nccl_rc != ncclSuccess) [[unlikely]]                                                    \
      KILN_FAIL("distributed", #expr, " failed: ", ncclGetErrorString(kiln_nccl_rc), " (", \
                ncclGetLastError(nullptr) ? ncclGetLastError(nullptr) : "", ")");                    \
  } while (0)

ncclDataType_t nccl_type(ScalarType t) {
  switch (t) {
    case kBool:
    case kUInt8: return ncclUint8;
    case kInt32: return ncclInt32;
    case kInt64: return ncclInt64;
    case kFloat16: return ncclFloat16;
    case kBFloat16: return ncclBfloat16;
    case kFloat64: return ncclFloat64;
    default: return ncclFloat32;
  }
}

// Bool tensors reduce as logical or (Sum, Max: the maximum of 0/1 bytes) and and (Min).
ncclRedOp_t nccl_op(ScalarType t, ReduceOp op) {
  if (t == kBool) return op == ReduceOp::Min ? ncclMin : ncclMax;
  switch (op) {
    case ReduceOp::Average: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    default: return ncclSum;
  }
}

cudaStream_t native(const cuda::Stream& s) { return static_cast<cudaStream_t>(s.native()); }

class NcclGroup final : public DeviceGroup {
 public:
  NcclGroup(ProcessGroup& host, int device) : device_(device) {
    check_one_gpu_each(host);
    // The id goes out even when rank 0 could not make one (all zero bytes then), so that no
    // process waits for it forever: every process fails alike.
    ncclUniqueId id{};
    const ncclResult_t made = host.rank() == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    host.broadcast(&id, sizeof id, 0);
    KILN_NCCL_CHECK(made);
    const ncclUniqueId none{};
    KILN_CHECK(std::memcmp(&id, &none, sizeof id) != 0, "distributed", "rank 0 could not create NCCL's unique id");
    KILN_CUDA_CHECK(cudaSetDevice(device_));
    KILN_NCCL_CHECK(ncclCommInitRank(&comm_, host.world_size(), id, host.rank()));
  }
  ~NcclGroup() override {
    if (comm_) ncclCommDestroy(comm_);
  }

  void all_reduce(void* data, int64_t count, ScalarType dtype, ReduceOp op, const cuda::Stream& stream) override {
    KILN_CUDA_CHECK(cudaSetDevice(device_));
    KILN_NCCL_CHECK(ncclAllReduce(data, data, static_cast<size_t>(count), nccl_type(dtype), nccl_op(dtype, op), comm_,
                                  native(stream)));
  }
  void broadcast(void* data, int64_t bytes, int root, const cuda::Stream& stream) override {
    KILN_CUDA_CHECK(cudaSetDevice(device_));
    KILN_NCCL_CHECK(ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root, comm_, native(stream)));
  }
  void all_gather(const void* in, void* out, int64_t bytes, const cuda::Stream& stream) override {
    KILN_CUDA_CHECK(cudaSetDevice(device_));
    KILN_NCCL_CHECK(ncclAllGather(in, out, static_cast<size_t>(bytes), ncclUint8, comm_, native(stream)));
  }
  void reduce_scatter(const void* in, void* out, int64_t count, ScalarType dtype, ReduceOp op,
                      const cuda::Stream& stream) override {
    KILN_CUDA_CHECK(cudaSetDevice(device_));
    KILN_NCCL_CHECK(ncclReduceScatter(in, out, static_cast<size_t>(count), nccl_type(dtype), nccl_op(dtype, op), comm_,
                                      native(stream)));
  }

 private:
  // NCCL needs a GPU of its own for each process (two on one GPU fail inside ncclCommInitRank, or
  // hang): every process sends its GPU's UUID and all check the same table, so all fail alike,
  // with the ranks named. A process that cannot read its UUID still takes part (its entry says so).
  void check_one_gpu_each(ProcessGroup& host) const {
    struct Entry {
      unsigned char uuid[16] = {};
      int32_t ok = 0;
    } mine;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device_) == cudaSuccess) {
      std::memcpy(mine.uuid, prop.uuid.bytes, sizeof mine.uuid);
      mine.ok = 1;
    }
    const int world = host.world_size();
    std::vector<Entry> all(static_cast<size_t>(world));
    host.all_gather(&mine, all.data(), sizeof(Entry));
    for (int r = 0; r < world; ++r) {
      KILN_CHECK(all[static_cast<size_t>(r)].ok, "distributed", "rank ", r, " cannot read its GPU's properties");
      for (int q = 0; q < r; ++q)
        KILN_CHECK(std::memcmp(all[static_cast<size_t>(q)].uuid, all[static_cast<size_t>(r)].uuid, 16) != 0,
                   "distributed", "ranks ", q, " and ", r, " use the same GPU; NCCL needs one GPU per process "
                   "(each uses cuda:local_rank: start at most as many processes per machine as it has GPUs)");
    }
  }

  int device_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_built() { return true; }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown version";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::unique_ptr<DeviceGroup> make_nccl_group(ProcessGroup& host, int device) {
  return std::make_unique<NcclGroup>(host, device);
}

}  // namespace kiln::distributed::detail
