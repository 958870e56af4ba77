// Reads the line-record fixtures of tests/fixtures/optim/ (made by make_optim_fixtures.py).
#pragma once

#include "fixture_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <map>
#include <vector>

#include "kiln/optim.h"

namespace kiln::test {

// One "case <name>" ... "end" block: its lines, each split into whitespace-separated words.
struct FixtureCase {
  std::string name;
  std::vector<std::vector<std::string>> lines;
  // The lines whose first word is `key`.
  std::vector<std::vector<std::string>> with(const std::string& key) const {
    std::vector<std::vector<std::string>> out;
    for (const auto& l : lines)
      if (!l.empty() && l[0] == key) out.push_back(l);
    return out;
  }
};


inline std::vector<FixtureCase> read_fixture_cases(const std::string& rel) {
  std::ifstream in(fixture_path(rel));
  EXPECT_TRUE(in.good()) << "cannot open " << fixture_path(rel);
  std::vector<FixtureCase> cases;
  std::string line;
  bool open = false;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::vector<std::string> words;
    for (std::string w; ss >> w;) words.push_back(w);
    if (words.empty() || words[0][0] == '#') continue;
    if (words[0] == "case") {
      cases.push_back({words.at(1), {}});
      open = true;
    } else if (words[0] == "end") {
      open = false;
    } else {
      EXPECT_TRUE(open) << "record outside a case: " << line;
      if (open) cases.back().lines.push_back(words);
    }
  }
  return cases;
}

inline double num(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  EXPECT_EQ(*end, '\0') << "not a number: " << s;
  return v;
}

// Words [from, end) as numbers.
inline std::vector<double> nums(const std::vector<std::string>& words, size_t from) {
  std::vector<double> v;
  for (size_t i = from; i < words.size(); ++i) v.push_back(num(words[i]));
  return v;
}

// "key value" pairs from words[from] on; the boolean options (amsgrad, nesterov, centered,
// maximize) as bools.
inline std::map<std::string, Scalar> option_pairs(const std::vector<std::string>& w, size_t from) {
  std::map<std::string, Scalar> m;
  for (size_t i = from; i + 1 < w.size(); i += 2) {
    const bool flag = w[i] == "amsgrad" || w[i] == "nesterov" || w[i] == "centered" || w[i] == "maximize";
    m[w[i]] = flag ? Scalar(num(w[i + 1]) != 0) : Scalar(num(w[i + 1]));
  }
  return m;
}

// The case's "param" rows as leaf tensors of dtype (row: param INDEX GROUP NDIM DIMS... VALUES...).
inline std::vector<Tensor> fixture_params(const FixtureCase& fc, ScalarType dtype) {
  std::vector<Tensor> params;
  for (const auto& w : fc.with("param")) {
    const int64_t ndim = std::stoll(w[3]);
    Shape shape;
    for (int64_t d = 0; d < ndim; ++d) shape.push_back(std::stoll(w[4 + d]));
    Tensor p = tensor(nums(w, 4 + ndim), shape, kFloat64).to(dtype);
    p.requires_grad_(true);
    params.push_back(p);
  }
  return params;
}

// The case's "group" rows (group ID key value ...) over those parameters.
inline std::vector<optim::OptimizerParamGroup> fixture_groups(const FixtureCase& fc, const std::vector<Tensor>& params) {
  std::vector<optim::OptimizerParamGroup> groups;
  for (const auto& g : fc.with("group")) {
    std::vector<Tensor> ps;
    for (const auto& w : fc.with("param"))
      if (w[2] == g[1]) ps.push_back(params[std::stoll(w[1])]);
    groups.emplace_back(ps, option_pairs(g, 2));
  }
  return groups;
}

}  // namespace kiln::test
