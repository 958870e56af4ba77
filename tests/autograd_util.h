// Helpers shared by the autograd tests (test_autograd.cpp, test_autograd_inplace.cpp): leaves and node names.
#pragma once

#include <initializer_list>
#include <string>

#include "test_util.h"

namespace kiln::test {

// A leaf tensor of values v (float64 unless dt says otherwise) that requires grad.
inline Tensor leaf(std::initializer_list<double> v, ScalarType dt = kFloat64) { return tensor(v, dt).requires_grad_(); }

// The name of t's grad_fn, or "(none)" when it has none.
inline std::string node_name(const Tensor& t) { return t.grad_fn() ? t.grad_fn()->name() : std::string("(none)"); }

}  // namespace kiln::test
