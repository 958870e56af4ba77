// Reads the line-record fixtures of tests/fixtures/optim/ (made by make_optim_fixtures.py).
#pragma once

#include "fixture_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

}  // namespace kiln::test
