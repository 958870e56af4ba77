// Choosing a training job's device: the one asked for, or a GPU only when it runs the job natively.
#include "kiln/train/device_choice.h"

#include "core/device_runtime.h"
#include "kiln/error.h"
#include "kiln/profiler.h"
#include "kiln/random.h"
#include "kiln/runtime.h"

namespace kiln::train {

Device parse_device(const std::string& name, const char* where) {
  const Device d = Device(name).resolved();
  if (d.is_cuda())
    KILN_CHECK(d.index < cuda::device_count(), where, "device ", name, " is not present (",
               cuda::device_count(), " CUDA device(s) found)");
  return d;
}

DeviceChoice choose_device(const std::string& requested, const std::function<void()>& probe) {
  if (!requested.empty()) return {parse_device(requested), ""};
  if (!cuda::is_available()) return {Device::cpu(), ""};
  // A GPU the build has no GPU code for (built for other architectures): say how to rebuild.
  if (std::string why = find_runtime(DeviceType::CUDA)->incompatible(0); !why.empty()) return {Device::cpu(), why};
  std::vector<std::string> ops;
  {
    const GeneratorState rng = get_rng_state();
    profiler::Session session({.timing = false});
    probe();
    for (const profiler::OpStat& s : session.stats()) ops.push_back(s.op);
    set_rng_state(rng);
  }
  const std::vector<std::string> missing = ops_without_kernel(ops, DeviceType::CUDA);
  if (missing.empty()) return {Device::cuda(0), ""};
  return {Device::cpu(), "cuda:0 present but lacks kernels for " + std::to_string(missing.size()) + " of the job's " +
                             std::to_string(ops.size()) + " ops; --device cuda to use it anyway"};
}

}  // namespace kiln::train
