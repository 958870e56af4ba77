// Formula weights for numerical fixtures: every tensor is a function of (name, flat index) that
// tests/fixtures/make_resnet_fixture.py computes bit for bit the same way, so tests compare with
// PyTorch-made fixtures without committed weight files. The formula is documented in that script.
#pragma once

#include "fixture_util.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::test {

// FNV-1a, 32 bits, over the name's bytes.
inline uint32_t formula_hash(std::string_view name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  return h;
}

// u_i in (-0.5, 0.5): Wellons' lowbias32 of a Weyl sequence seeded by the name's hash. Every
// step is exact in double (x < 2^32), so no compiler or libm can change it.
inline double formula_unit(uint32_t name_hash, int64_t i) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u + name_hash;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return (static_cast<double>(x) + 0.5) / 4294967296.0 - 0.5;
}

inline bool formula_ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// value = offset + scale * u. Where offset != 0, scale is a power of two, so scale * u is exact
// and a fused multiply-add gives the same double as separate operations.
struct FormulaScale {
  double scale;
  double offset;
};

// The (scale, offset) rule by name suffix and rank; "input" is the network input.
inline FormulaScale formula_scale(const std::string& name, const Shape& shape) {
  if (formula_ends_with(name, "running_var")) return {0.25, 0.5};
  if (formula_ends_with(name, "running_mean")) return {0.25, 0.0};
  if (formula_ends_with(name, "weight") && shape.size() >= 2) {
    // Uniform with He-normal's variance 2 / fan_in: (sqrt(24 / fan_in))^2 / 12.
    int64_t fan_in = shape_numel(shape, "formula_scale") / shape[0];
    return {std::sqrt(24.0 / static_cast<double>(fan_in)), 0.0};
  }
  if (formula_ends_with(name, "weight")) return {0.25, 0.5};  // batch-norm gamma in [0.375, 0.625]
  if (formula_ends_with(name, "bias")) return {0.25, 0.0};
  if (name == "input") return {4.0, 0.0};
  KILN_FAIL("formula_scale", "no formula for the name \"", name, "\" (shape ", shape, ")");
}

// The float32 values of `name` with `shape`, in row-major order.
inline std::vector<float> formula_values(const std::string& name, const Shape& shape) {
  FormulaScale s = formula_scale(name, shape);
  uint32_t h = formula_hash(name);
  int64_t n = shape_numel(shape, "formula_values");
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double u = formula_unit(h, i);
    double x = s.offset == 0.0 ? s.scale * u : s.offset + s.scale * u;
    v[static_cast<size_t>(i)] = static_cast<float>(x);  // round to nearest even, as NumPy does
  }
  return v;
}

// The tensor for a state_dict entry (or "input"): float32-rounded values stored as `dtype`
// (so a float64 tensor holds exactly the values the float64 reference used);
// *.num_batches_tracked is an int64 zero whatever `dtype` says, as in PyTorch.
inline Tensor formula_tensor(const std::string& name, const Shape& shape, ScalarType dtype = kFloat32) {
  if (formula_ends_with(name, "num_batches_tracked")) return zeros(shape, kInt64);
  Tensor t = tensor(formula_values(name, shape), shape, kFloat32);
  return dtype == kFloat32 ? t : t.to(dtype);
}

// The fixture input of that shape (name "input", values in [-2, 2]).
inline Tensor formula_input(const Shape& shape, ScalarType dtype = kFloat32) {
  return formula_tensor("input", shape, dtype);
}

// A state dict with formula values for these keys and shapes.
inline std::map<std::string, Tensor> formula_state_dict(
    const std::vector<std::pair<std::string, Shape>>& keys_and_shapes, ScalarType dtype = kFloat32) {
  std::map<std::string, Tensor> sd;
  for (const auto& [name, shape] : keys_and_shapes) sd[name] = formula_tensor(name, shape, dtype);
  return sd;
}

// A state dict with formula values for the keys and shapes of `like` (e.g. model->state_dict()),
// each in the dtype of the entry it replaces.
inline std::map<std::string, Tensor> formula_state_dict(const std::map<std::string, Tensor>& like) {
  std::map<std::string, Tensor> sd;
  for (const auto& [name, t] : like) sd[name] = formula_tensor(name, t.shape(), t.dtype());
  return sd;
}


}  // namespace kiln::test
