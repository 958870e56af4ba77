// Upsample: construction (the options checked as interpolate will use them), forward, printing.
#include "kiln/nn/upsampling.h"

#include "nn/python_float.h"

namespace kiln::nn {

UpsampleImpl::UpsampleImpl(UpsampleOptions o) : options(std::move(o)) {
  KILN_CHECK(options.size.empty() != options.scale_factor.empty(), "Upsample",
             options.size.empty() ? "either size or scale_factor must be given"
                                  : "only one of size and scale_factor may be given");
}

Tensor UpsampleImpl::forward(const Tensor& x) {
  return functional::interpolate(x, options);
}

// As torch: scale_factor=2.0 or size=(4, 4), then the mode.
void UpsampleImpl::pretty_print(std::ostream& os) const {
  os << "Upsample(";
  const bool by_size = !options.size.empty();
  const size_t n = by_size ? options.size.size() : options.scale_factor.size();
  os << (by_size ? "size=" : "scale_factor=") << (n > 1 ? "(" : "");
  for (size_t i = 0; i < n; ++i) {
    if (i) os << ", ";
    if (by_size) os << options.size[i];
    else os << detail::python_float(options.scale_factor[i]);
  }
  os << (n > 1 ? ")" : "") << ", mode='" << options.mode << "')";
}

}  // namespace kiln::nn
