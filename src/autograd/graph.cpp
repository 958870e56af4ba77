// Saved-tensor hooks (kiln/autograd/graph.h): a per-thread stack of guards, and save_on_cpu.
#include <iterator>
#include <utility>
#include <vector>

#include "autograd/saved_hooks.h"
#include "core/device_runtime.h"
#include "core/tensor_util.h"
#include "kiln/autograd.h"
#include "kiln/error.h"

namespace kiln::autograd {
namespace {
thread_local std::vector<std::shared_ptr<const detail::SavedHooks>> t_hooks;
}  // namespace

std::shared_ptr<const detail::SavedHooks> detail::current_saved_hooks() {
  return t_hooks.empty() ? nullptr : t_hooks.back();
}

namespace graph {

SavedTensorsHooks::SavedTensorsHooks(PackHook pack, UnpackHook unpack) {
  KILN_CHECK(pack && unpack, "saved_tensors_hooks", "both a pack and an unpack hook are needed");
  auto hooks = std::make_shared<const detail::SavedHooks>(detail::SavedHooks{std::move(pack), std::move(unpack)});
  pushed_ = hooks.get();
  t_hooks.push_back(std::move(hooks));
}

// Its own hooks leave the stack, wherever they are in it (guards held in smart pointers may end
// out of order); on another thread, whose stack does not hold them, nothing is removed.
SavedTensorsHooks::~SavedTensorsHooks() {
  for (auto it = t_hooks.rbegin(); it != t_hooks.rend(); ++it)
    if (it->get() == pushed_) {
      t_hooks.erase(std::next(it).base());
      return;
    }
}

namespace {
struct OnCpu {
  Tensor host;
  Device device;
};
}  // namespace

// The copy to the host waits for the device (to(cpu) does): the saved tensor may be freed as soon
// as pack returns. The copy back is queued on the current stream and not waited for.
SaveOnCpu::SaveOnCpu(bool pin_memory)
    : hooks_(
          [pin_memory](const Tensor& t) -> std::any {
            if (t.device().is_cpu()) return OnCpu{t, t.device()};
            if (!pin_memory) return OnCpu{t.to(Device::cpu()), t.device()};
            // Straight into page-locked memory, row-major (a strided view made so on its device).
            const Tensor dense = t.contiguous();
            Tensor host = make_empty_pinned(t.shape(), t.dtype());
            copy_bytes(host.data_ptr(), Device::cpu(), dense.data_ptr(), dense.device(), host.nbytes(), false);
            return OnCpu{host, t.device()};
          },
          [](const std::any& packed) -> Tensor {
            const OnCpu& p = std::any_cast<const OnCpu&>(packed);
            return p.device.is_cpu() ? p.host : p.host.to(p.device, /*non_blocking=*/p.host.is_pinned());
          }) {}

}  // namespace graph
}  // namespace kiln::autograd
