// Which GPUs a build's device code runs on, from the CMake architecture list it was built with
// (KILN_CUDA_ARCHITECTURES). Host code only, so that CPU tests check the rules.
//
// An entry is CMake's: "90" (machine code for sm_90 and its PTX), "90-real" (machine code only),
// "90-virtual" (PTX only), with an optional suffix: "90a" (arch-specific: that exact GPU) or
// "100f" (family-specific). Machine code for X.Y runs on compute capability X.Z with Z >= Y; PTX
// for XY is compiled by the driver for any compute capability >= XY ("a" and "f" PTX only within
// their arch or family). "all", "all-major" and "native" cover every GPU the build is meant for.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::backend::cuda {

struct ArchEntry {
  int cc = 0;        // compute capability as major * 10 + minor: 90, 100, 120
  char suffix = 0;   // 0, 'a' or 'f'
  bool sass = true;  // machine code ("-virtual" has none)
  bool ptx = true;   // PTX ("-real" has none)
};

// The list's entries (';' or ',' between them); an entry that is not a number with an optional
// a/f and -real/-virtual (such as "native") gives nothing.
inline std::vector<ArchEntry> parse_arch_list(std::string_view list) {
  std::vector<ArchEntry> out;
  while (!list.empty()) {
    const size_t end = list.find_first_of(";,");
    std::string_view item = list.substr(0, end);
    list = end == std::string_view::npos ? std::string_view() : list.substr(end + 1);
    ArchEntry e;
    if (item.ends_with("-real")) {
      e.ptx = false;
      item.remove_suffix(5);
    } else if (item.ends_with("-virtual")) {
      e.sass = false;
      item.remove_suffix(8);
    }
    if (!item.empty() && (item.back() == 'a' || item.back() == 'f')) {
      e.suffix = item.back();
      item.remove_suffix(1);
    }
    if (item.empty() || item.size() > 4 || item.find_first_not_of("0123456789") != std::string_view::npos) continue;
    for (char c : item) e.cc = e.cc * 10 + (c - '0');
    out.push_back(e);
  }
  return out;
}

// Whether the list names a whole class of GPUs rather than architectures ("all", "native").
inline bool arch_list_is_symbolic(std::string_view list) {
  return list == "all" || list == "all-major" || list == "native";
}

// torch.cuda.get_arch_list's names: "sm_90" for machine code, "compute_90" for PTX.
inline std::vector<std::string> arch_names(std::string_view list) {
  if (arch_list_is_symbolic(list)) return {std::string(list)};
  std::vector<std::string> names;
  for (const ArchEntry& e : parse_arch_list(list)) {
    const std::string code = std::to_string(e.cc) + (e.suffix ? std::string(1, e.suffix) : std::string());
    if (e.sass) names.push_back("sm_" + code);
    if (e.ptx) names.push_back("compute_" + code);
  }
  return names;
}

// Whether code built from `list` runs on a GPU of compute capability `cc`.
inline bool arch_list_runs_on(std::string_view list, int cc) {
  if (arch_list_is_symbolic(list)) return true;
  for (const ArchEntry& e : parse_arch_list(list)) {
    const bool same_major = cc / 10 == e.cc / 10 && cc >= e.cc;
    const bool fits = e.suffix == 'a' ? cc == e.cc : e.suffix == 'f' ? same_major : false;
    if (e.sass && (e.suffix ? fits : same_major)) return true;
    if (e.ptx && (e.suffix ? fits : cc >= e.cc)) return true;
  }
  return false;
}

// Empty when the build runs on the GPU; else what to do, for example "cuda:0 (NVIDIA A100) has
// compute capability 8.0, and this build of Kiln has GPU code for sm_90, compute_90 only:
// rebuild with -DKILN_CUDA_ARCHITECTURES="90;80"".
inline std::string arch_list_problem(std::string_view list, int cc, const std::string& device) {
  if (arch_list_runs_on(list, cc)) return "";
  std::string names;
  for (const std::string& n : arch_names(list)) names += (names.empty() ? "" : ", ") + n;
  const std::string capability = std::to_string(cc / 10) + "." + std::to_string(cc % 10);
  std::string fix = std::string(list);
  for (char& c : fix)
    if (c == ',') c = ';';
  fix += (fix.empty() ? "" : ";") + std::to_string(cc);
  return device + " has compute capability " + capability + ", and this build of Kiln has GPU code for " +
         (names.empty() ? std::string("no architecture") : names + " only") +
         ": rebuild with -DKILN_CUDA_ARCHITECTURES=\"" + fix + "\"";
}

}  // namespace kiln::backend::cuda
