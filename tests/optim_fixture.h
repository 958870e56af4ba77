// Reads the line-record fixtures of tests/fixtures/optim/ (made by make_optim_fixtures.py).
#pragma once

#include "fixture_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <map>
#include <vector>

#include "kiln/optim.h"
#include "test_util.h"

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

// A fixture case's parameters (fresh leaves, in the case's dtype, or `dtype` where given; float64
// where the case says none) and its optimizer, made by `make` from the case's "kind" (empty where
// it says none), its groups and its "defaults" options.
using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(
    const std::string& kind, std::vector<optim::OptimizerParamGroup> groups, const std::map<std::string, Scalar>& defaults)>;

struct FixtureRun {
  std::vector<Tensor> params;
  std::unique_ptr<optim::Optimizer> opt;
  const FixtureCase* c;
  ScalarType dtype;

  FixtureRun(const FixtureCase& fc, const MakeOptimizer& make, std::optional<ScalarType> as = std::nullopt) : c(&fc) {
    const auto dtypes = fc.with("dtype"), kinds = fc.with("kind");
    const std::string named = dtypes.empty() ? "float64" : dtypes[0].at(1);
    dtype = as ? *as : named == "float32" ? kFloat32 : named == "bfloat16" ? kBFloat16 : kFloat64;
    params = fixture_params(fc, dtype);
    opt = make(kinds.empty() ? "" : kinds[0].at(1), fixture_groups(fc, params),
               option_pairs(fc.with("defaults").at(0), 1));
  }
  // Step s with the case's gradients (none for a parameter the case gives none).
  void step(int64_t s) {
    for (auto& p : params) p.set_grad(Tensor());
    for (const auto& w : c->with("grad"))
      if (std::stoll(w[1]) == s) {
        Tensor& p = params[std::stoll(w[2])];
        p.set_grad(tensor(nums(w, 3), p.shape(), kFloat64).to(dtype));
      }
    opt->step();
  }
  int64_t steps() const { return std::stoll(c->with("expect").back().at(1)) + 1; }
};

// Every case's parameters ("expect") and step counts ("step") after each step, as PyTorch's: by
// default float32 within a few float32 ulps (PyTorch's arithmetic in the same order), float64
// closer; `as` runs the cases in another dtype, with tolerances `tol` {rtol, atol}.
inline void expect_trajectories_match(const std::vector<FixtureCase>& cases, const MakeOptimizer& make,
                                      std::optional<ScalarType> as = std::nullopt,
                                      std::optional<std::pair<double, double>> tol = std::nullopt) {
  for (const auto& fc : cases) {
    FixtureRun run(fc, make, as);
    const bool f32 = run.dtype == kFloat32;
    const double rtol = tol ? tol->first : f32 ? 1e-6 : 1e-12, atol = tol ? tol->second : f32 ? 1e-8 : 1e-15;
    for (int64_t s = 0; s < run.steps(); ++s) {
      run.step(s);
      for (const auto& w : fc.with("expect"))
        if (std::stoll(w[1]) == s) {
          const Tensor& p = run.params[std::stoll(w[2])];
          expect_close(p, nums(w, 3), p.shape(), rtol, atol, fc.name + " step " + w[1] + " param " + w[2]);
        }
      for (const auto& w : fc.with("step"))
        if (std::stoll(w[1]) == s) {
          const auto& st = run.opt->state(run.params[std::stoll(w[2])]);
          ASSERT_TRUE(st.count("step")) << fc.name;
          EXPECT_EQ(st.at("step").item<float>(), num(w[3])) << fc.name << " step " << s << " param " << w[2];
        }
    }
  }
}

// Stopping after 3 steps, saving, loading into a fresh optimizer (whose groups `scramble` changes
// first: the state dict's options must win) and continuing gives exactly the uninterrupted run.
inline void expect_state_dict_round_trip(const std::vector<FixtureCase>& cases, const MakeOptimizer& make,
                                         const std::function<void(optim::Optimizer&)>& scramble) {
  for (const auto& c : cases) {
    FixtureRun whole(c, make), first(c, make);
    const int64_t k = 3;
    for (int64_t s = 0; s < k; ++s) {
      whole.step(s);
      first.step(s);
    }
    auto sd = first.opt->state_dict();
    FixtureRun second(c, make);
    for (size_t i = 0; i < second.params.size(); ++i) {
      NoGradGuard g;
      second.params[i].copy_(first.params[i]);
    }
    scramble(*second.opt);
    second.opt->load_state_dict(sd);
    first.opt.reset();
    for (int64_t s = k; s < whole.steps(); ++s) {
      whole.step(s);
      second.step(s);
      for (size_t i = 0; i < whole.params.size(); ++i)
        EXPECT_EQ(values(whole.params[i]), values(second.params[i])) << c.name << " step " << s << " param " << i;
    }
  }
}

}  // namespace kiln::test
