// kiln bench's table and chart. The SVG is written by hand: a few rects and texts.
#include "tools/kiln/bench_report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>

namespace kiln::cli::bench {

namespace {
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

std::string mib(int64_t bytes) { return fmt("%.0f", static_cast<double>(bytes) / (1 << 20)); }

// Text in SVG: & < > and quotes escaped.
std::string xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

struct Bar {
  std::string label;  // under the bar
  double value;
  std::string cls;    // "bar" or "bar peer"
  std::string color;
  std::string text;   // above the bar
};
struct Group {
  std::string title;
  std::vector<Bar> bars;
};

std::string color_for(const RunSpec& s) {
  const bool train = s.mode == "train";
  if (s.device == "cpu" && s.dtype == "fp32") return train ? "#9e9e9e" : "#c8c8c8";
  if (s.dtype == "bf16") return train ? "#2e7d32" : "#81c784";
  return train ? "#1565c0" : "#64b5f6";
}

std::string bar_label(const RunSpec& s) { return s.mode + " " + s.device + (s.dtype == "fp32" ? "" : " " + s.dtype); }

std::string render(const std::vector<Group>& groups, const std::string& title, const std::string& y_label,
                   const std::string& note, bool shared_scale) {
  const int bar_w = 34, gap = 10, group_gap = 40, left = 60, top = 60, plot_h = 300, bottom = 110;
  int width = left + 20;
  for (const auto& g : groups) width += static_cast<int>(g.bars.size()) * (bar_w + gap) + group_gap;
  width = std::max(width, 480);
  const int height = top + plot_h + bottom;
  double global_max = 0;
  for (const auto& g : groups)
    for (const auto& b : g.bars) global_max = std::max(global_max, b.value);
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
                  std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " +
                  std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + std::to_string(width / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" + xml(title) +
       "</text>\n";
  if (!note.empty())
    s += "<text x=\"" + std::to_string(width / 2) + "\" y=\"40\" text-anchor=\"middle\" fill=\"#555\">" + xml(note) +
         "</text>\n";
  s += "<text transform=\"translate(16," + std::to_string(top + plot_h / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
       xml(y_label) + "</text>\n";
  const int base_y = top + plot_h;
  s += "<line x1=\"" + std::to_string(left - 10) + "\" y1=\"" + std::to_string(base_y) + "\" x2=\"" +
       std::to_string(width - 10) + "\" y2=\"" + std::to_string(base_y) + "\" stroke=\"black\"/>\n";
  int x = left;
  for (const auto& g : groups) {
    double max = shared_scale ? global_max : 0;
    if (!shared_scale)
      for (const auto& b : g.bars) max = std::max(max, b.value);
    if (max <= 0) max = 1;
    const int group_w = static_cast<int>(g.bars.size()) * (bar_w + gap);
    for (const auto& b : g.bars) {
      const int h = std::max(1, static_cast<int>(b.value / max * (plot_h - 20)));
      s += "<rect class=\"" + b.cls + "\" x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(base_y - h) +
           "\" width=\"" + std::to_string(bar_w) + "\" height=\"" + std::to_string(h) + "\" fill=\"" + b.color +
           "\"><title>" + xml(b.label + ": " + b.text) + "</title></rect>\n";
      s += "<text x=\"" + std::to_string(x + bar_w / 2) + "\" y=\"" + std::to_string(base_y - h - 4) +
           "\" text-anchor=\"middle\">" + xml(b.text) + "</text>\n";
      s += "<text transform=\"translate(" + std::to_string(x + bar_w / 2 + 4) + "," + std::to_string(base_y + 8) +
           ") rotate(50)\" font-size=\"10\">" + xml(b.label) + "</text>\n";
      x += bar_w + gap;
    }
    s += "<text x=\"" + std::to_string(x - group_w / 2 - gap / 2) + "\" y=\"" + std::to_string(height - 12) +
         "\" text-anchor=\"middle\" font-weight=\"bold\">" + xml(g.title) + "</text>\n";
    x += group_gap;
  }
  return s + "</svg>\n";
}

std::vector<Group> grouped(const std::vector<RunResult>& runs,
                           const std::function<void(const RunResult&, std::vector<Bar>&)>& add) {
  std::vector<Group> groups;
  for (const auto& r : runs) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.title == r.spec.model; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{r.spec.model, {}});
    add(r, it->bars);
  }
  return groups;
}
}  // namespace

std::string table_header(bool vs_pytorch) {
  std::string h = pad("model", 11) + pad("mode", 6) + pad("device", 8) + pad("dtype", 6) + pad("batch", 6) +
                  pad("median s", 10) + pad("min s", 9) + pad("max s", 9) + pad("host s", 9) + pad("samples/s", 11) +
                  pad("TFLOP/s", 9) + pad("peak MiB", 10) + "vs cpu fp32";
  if (vs_pytorch) h += "  PyTorch/s  Kiln/PyTorch";
  return h;
}

std::string table_row(const RunResult& r, bool vs_pytorch) {
  const RunSpec& s = r.spec;
  std::string row = pad(s.model, 11) + pad(s.mode, 6) + pad(s.device, 8) + pad(s.dtype, 6) +
                    pad(std::to_string(s.batch), 6) + pad(fmt("%.4f", r.median_s), 10) + pad(fmt("%.4f", r.min_s), 9) +
                    pad(fmt("%.4f", r.max_s), 9) + pad(fmt("%.4f", r.host_s), 9) +
                    pad(fmt("%.2f", r.samples_per_s), 11) + pad(r.tflops ? fmt("%.3f", *r.tflops) : "-", 9) +
                    pad(mib(r.peak_bytes), 10) +
                    pad(r.speedup_vs_cpu_fp32 ? fmt("%.2fx", *r.speedup_vs_cpu_fp32) : "-", 11);
  if (vs_pytorch)
    row += "  " + pad(r.pytorch_samples_per_s ? fmt("%.2f", *r.pytorch_samples_per_s) : "-", 11) +
           (r.vs_pytorch ? fmt("%.2f", *r.vs_pytorch) : "-");
  return row;
}

std::string table_note(const RunSpec& s, const std::string& note) {
  return pad(s.model, 11) + pad(s.mode, 6) + pad(s.device, 8) + pad(s.dtype, 6) + pad(std::to_string(s.batch), 6) +
         note;
}

std::string chart_svg(const std::vector<RunResult>& runs) {
  bool all_speedups = !runs.empty(), any_other = false, any_peer = false;
  for (const auto& r : runs) {
    all_speedups = all_speedups && r.speedup_vs_cpu_fp32.has_value();
    any_other = any_other || !(r.spec.device == "cpu" && r.spec.dtype == "fp32");
    any_peer = any_peer || r.pytorch_samples_per_s.has_value();
  }
  if (any_peer) {
    auto groups = grouped(runs, [](const RunResult& r, std::vector<Bar>& bars) {
      bars.push_back({"Kiln " + bar_label(r.spec), r.samples_per_s, "bar", color_for(r.spec), fmt("%.3g", r.samples_per_s)});
      const double p = r.pytorch_samples_per_s.value_or(0);
      bars.push_back({"PyTorch " + bar_label(r.spec), p, "bar peer", "#ef6c00",
                      r.pytorch_samples_per_s ? fmt("%.3g", p) : "n/a"});
    });
    return render(groups, "Kiln vs PyTorch: samples/s", "samples/s (each model on its own scale)",
                  "orange: PyTorch; the other bar of each pair: Kiln", false);
  }
  if (all_speedups && any_other) {
    auto groups = grouped(runs, [](const RunResult& r, std::vector<Bar>& bars) {
      bars.push_back({bar_label(r.spec), *r.speedup_vs_cpu_fp32, "bar", color_for(r.spec),
                      fmt("%.1fx", *r.speedup_vs_cpu_fp32)});
    });
    return render(groups, "Speed-up over the CPU (float32), samples/s", "x CPU float32", "", true);
  }
  auto groups = grouped(runs, [](const RunResult& r, std::vector<Bar>& bars) {
    bars.push_back({bar_label(r.spec), r.samples_per_s, "bar", color_for(r.spec), fmt("%.3g", r.samples_per_s)});
  });
  return render(groups, "Samples/s", "samples/s (each model on its own scale)",
                "no accelerator run to compare with the CPU: samples/s instead of speed-ups", false);
}

std::string write_png(const std::string& svg_path, const std::string& png_path) {
  auto on_path = [](const char* tool) {
    return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) == 0;
  };
  auto quote = [](const std::string& p) {
    std::string q = "'";
    for (char c : p) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  if (on_path("rsvg-convert") &&
      std::system(("rsvg-convert -o " + quote(png_path) + " " + quote(svg_path) + " 2>/dev/null").c_str()) == 0)
    return "rsvg-convert";
  if (on_path("convert") && std::system(("convert " + quote(svg_path) + " " + quote(png_path) + " 2>/dev/null").c_str()) == 0)
    return "convert";
  return "";
}

}  // namespace kiln::cli::bench
