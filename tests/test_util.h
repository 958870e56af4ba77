// Helpers shared by the test suites: reference data, element access and comparisons.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <clocale>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::test {

// Values of t in row-major order, as doubles (any dtype, any device, any strides).
inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Asserts t has `shape` and values within atol + rtol * |expected| (NaNs must match).
inline void expect_close(const Tensor& t, const std::vector<double>& expected, const Shape& shape,
                         double rtol = 1e-5, double atol = 1e-6, const std::string& what = "") {
  ASSERT_TRUE(t.defined()) << what;
  ASSERT_EQ(t.shape(), shape) << what;
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), expected.size()) << what;
  // The first 20 bad elements each, then their count (a broken kernel on a large case must not
  // write a log of millions of lines).
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = expected[i], g = got[i];
    const bool ok = std::isnan(e) ? std::isnan(g) : std::isinf(e) ? g == e : std::abs(g - e) <= atol + rtol * std::abs(e);
    if (ok || ++bad > 20) continue;
    ADD_FAILURE() << what << " element " << i << ": got " << g << ", expected " << e << " (tolerance "
                  << atol + rtol * std::abs(e) << ")";
  }
  if (bad > 20) ADD_FAILURE() << what << ": " << bad << " of " << got.size() << " elements differ (the first 20 shown)";
}

// got against torch's result `want` (a fixture's), which summed in another order: float32 within
// 1e-5 relative and atol_f32 absolute, float64 within 1e-12 relative and atol_f64.
inline void expect_torch_close(const Tensor& got, const Tensor& want, const std::string& what, double atol_f32,
                               double atol_f64) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const bool f32 = want.dtype() == kFloat32;
  expect_close(got.detach().cpu(), values(want), want.shape(), f32 ? 1e-5 : 1e-12, f32 ? atol_f32 : atol_f64, what);
}

// A module as its pretty_print writes it (PyTorch's repr).
inline std::string printed(const nn::Module& m) {
  std::ostringstream os;
  m.pretty_print(os);
  return os.str();
}

// Sets an environment variable for a scope (nullptr: unset), then restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    set(value);
  }
  ~ScopedEnv() { set(had_ ? old_.c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void set(const char* value) { value ? setenv(name_.c_str(), value, 1) : unsetenv(name_.c_str()); }
  std::string name_, old_;
  bool had_ = false;
};

// Expects `fn` to throw kiln::Error whose message contains `needle`.
template <class F>
void expect_error(F&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error containing \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

// The devices this build can run on: the CPU, plus each CUDA device present.
inline std::vector<Device> devices() {
  std::vector<Device> d{Device::cpu()};
  for (int i = 0; i < cuda::device_count(); ++i) d.push_back(Device::cuda(i));
  return d;
}

// A fixture with a fresh temporary directory per test (removed afterwards) and a file writer.
class TempDirTest : public ::testing::Test {
 protected:
  std::string dir_ = ::testing::TempDir() + "kiln_" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
                     std::to_string(::getpid());
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Writes `data` to dir_/name and returns the path.
  std::string write(const std::string& name, const std::string& data) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << data;
    return path;
  }
};

// A decimal-comma LC_NUMERIC ("0,5") for the object's life: the system's de_DE, or one that
// localedef builds from Debian's locale sources into a directory of this process; active() is
// false where neither is (the test then skips, saying so).
class CommaDecimalLocale {
 public:
  CommaDecimalLocale() {
    if (!std::setlocale(LC_NUMERIC, "de_DE.UTF-8")) {
      const auto dir = std::filesystem::temp_directory_path() / ("kiln_test_locale_" + std::to_string(::getpid()));
      std::filesystem::create_directories(dir);
      const std::string cmd = "localedef -i de_DE -f UTF-8 '" + (dir / "de_DE.UTF-8").string() + "' >/dev/null 2>&1";
      if (std::system(cmd.c_str()) == 0) {
        setenv("LOCPATH", dir.c_str(), 1);
        std::setlocale(LC_NUMERIC, "de_DE.UTF-8");
      }
      dir_ = dir;
    }
  }
  ~CommaDecimalLocale() {
    std::setlocale(LC_NUMERIC, "C");
    unsetenv("LOCPATH");
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  bool active() const { return std::string(std::localeconv()->decimal_point) == ","; }

 private:
  std::filesystem::path dir_;
};

}  // namespace kiln::test
