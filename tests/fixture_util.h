// Reading committed fixtures (tests/fixtures/, made by the committed scripts there) and the
// relative-error measure the fixture scripts use.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/io.h"
#include "kiln/tensor.h"

namespace kiln::test {

// Where a committed fixture lives.
inline std::string fixture_path(const std::string& relative) {
#ifdef KILN_SOURCE_DIR
  std::string path = KILN_SOURCE_DIR;  // appended in place: g++ 14 warns (wrongly) on a + b + c
  path += "/tests/fixtures/";
  path += relative;
  return path;
#else
  std::string f = __FILE__;
  return f.substr(0, f.find_last_of('/')) + "/fixtures/" + relative;
#endif
}

// Tensor `key` of the safetensors fixture `relative` (each file read once).
inline const Tensor& fixture_tensor(const std::string& relative, const std::string& key) {
  static std::map<std::string, std::map<std::string, Tensor>> files;
  auto f = files.find(relative);
  if (f == files.end()) f = files.emplace(relative, io::load_safetensors(fixture_path(relative))).first;
  auto it = f->second.find(key);
  if (it == f->second.end()) throw std::runtime_error(relative + " has no " + key);
  return it->second;
}

// max |got - ref| <= rtol * max |ref|.
inline void expect_rel(const Tensor& got, const Tensor& ref, double rtol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.shape(), ref.shape()) << what;
  std::vector<double> g = got.to_vector<double>(), w = ref.to_vector<double>();
  double scale = 0, err = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    scale = std::max(scale, std::abs(w[i]));
    err = std::max(err, std::abs(g[i] - w[i]));
  }
  EXPECT_LE(err, rtol * scale) << what << ": max error " << err << ", max |ref| " << scale;
}

// Equal to a fixture's tensor bit for bit (any NaN equals any NaN; 0 and -0 differ).
inline void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same = std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i] && std::signbit(g[i]) == std::signbit(w[i]);
    if (!same && ++bad <= 5) ADD_FAILURE() << what << " element " << i << ": got " << g[i] << ", want " << w[i];
  }
  EXPECT_EQ(bad, 0) << what << ": elements that differ";
}

// Within `ulps` units in the last place of the dtype (NaN where torch has NaN, infinities equal).
inline void expect_within_ulps(const Tensor& got, const Tensor& want, double ulps, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const int mantissa = want.dtype() == kFloat64 ? 52 : want.dtype() == kFloat32 ? 23 : want.dtype() == kBFloat16 ? 7 : 10;
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (std::isnan(w[i]) || std::isinf(w[i])) ok = std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i];
    else ok = std::abs(g[i] - w[i]) <= ulps * std::ldexp(std::max(std::abs(w[i]), 1e-30), -mantissa);
    if (!ok && ++bad <= 5) ADD_FAILURE() << what << " element " << i << ": got " << g[i] << ", torch " << w[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

}  // namespace kiln::test
