// kiln bench's table and chart. The SVG is written by hand: a few rects and texts.
#include "tools/kiln/bench_report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>

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

// A ratio as a bar's label: two significant digits ("0.004x", "1.5x", "21x"), whole numbers past 100.
std::string times(double v) { return fmt(v >= 100 ? "%.0fx" : "%.2gx", v); }

struct Bar {
  std::string label;            // under the bar
  std::optional<double> value;  // none: no bar, "n/a" in its place
  std::string cls;              // "bar" or "bar peer"
  std::string color;
  std::string text;             // above the bar
};
struct Group {
  std::string title;
  std::vector<Bar> bars;
};
// One chart of a model-grouped bar per run; chart_svg stacks one or two.
struct Panel {
  std::vector<Group> groups;
  std::string title, y_label, note;
  bool shared_scale;  // one scale for every model (ratios), or each model its own (samples/s)
};

std::string color_for(const RunSpec& s) {
  const bool train = s.mode == "train";
  if (s.device == "cpu" && s.dtype == "fp32") return train ? "#9e9e9e" : "#c8c8c8";
  if (s.dtype == "bf16") return train ? "#2e7d32" : "#81c784";
  return train ? "#1565c0" : "#64b5f6";
}

std::string bar_label(const RunSpec& s) { return s.mode + " " + s.device + (s.dtype == "fp32" ? "" : " " + s.dtype); }

constexpr int kBarW = 34, kGap = 10, kGroupGap = 40, kLeft = 60, kTop = 60, kPlotH = 300, kBottom = 110;
constexpr int kPanelH = kTop + kPlotH + kBottom;

int panel_width(const Panel& p) {
  int width = kLeft + 20;
  for (const auto& g : p.groups) width += static_cast<int>(g.bars.size()) * (kBarW + kGap) + kGroupGap;
  return std::max(width, 480);
}

// One panel's elements, drawn from y = 0 at the width given.
std::string render_panel(const Panel& p, int width) {
  double global_max = 0;
  for (const auto& g : p.groups)
    for (const auto& b : g.bars) global_max = std::max(global_max, b.value.value_or(0));
  std::string s = "<text x=\"" + std::to_string(width / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" +
                  xml(p.title) + "</text>\n";
  if (!p.note.empty())
    s += "<text x=\"" + std::to_string(width / 2) + "\" y=\"40\" text-anchor=\"middle\" fill=\"#555\">" + xml(p.note) +
         "</text>\n";
  s += "<text transform=\"translate(16," + std::to_string(kTop + kPlotH / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + xml(p.y_label) + "</text>\n";
  const int base_y = kTop + kPlotH;
  s += "<line x1=\"" + std::to_string(kLeft - 10) + "\" y1=\"" + std::to_string(base_y) + "\" x2=\"" +
       std::to_string(width - 10) + "\" y2=\"" + std::to_string(base_y) + "\" stroke=\"black\"/>\n";
  int x = kLeft;
  for (const auto& g : p.groups) {
    double max = p.shared_scale ? global_max : 0;
    if (!p.shared_scale)
      for (const auto& b : g.bars) max = std::max(max, b.value.value_or(0));
    if (max <= 0) max = 1;
    const int group_w = static_cast<int>(g.bars.size()) * (kBarW + kGap);
    for (const auto& b : g.bars) {
      int h = 0;
      if (b.value) {
        h = std::max(1, static_cast<int>(*b.value / max * (kPlotH - 20)));
        s += "<rect class=\"" + b.cls + "\" x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(base_y - h) +
             "\" width=\"" + std::to_string(kBarW) + "\" height=\"" + std::to_string(h) + "\" fill=\"" + b.color +
             "\"><title>" + xml(b.label + ": " + b.text) + "</title></rect>\n";
      }
      s += "<text x=\"" + std::to_string(x + kBarW / 2) + "\" y=\"" + std::to_string(base_y - h - 4) +
           "\" text-anchor=\"middle\"" + (b.value ? "" : " fill=\"#888\"") + ">" + xml(b.text) + "</text>\n";
      s += "<text transform=\"translate(" + std::to_string(x + kBarW / 2 + 4) + "," + std::to_string(base_y + 8) +
           ") rotate(50)\" font-size=\"10\">" + xml(b.label) + "</text>\n";
      x += kBarW + kGap;
    }
    s += "<text x=\"" + std::to_string(x - group_w / 2 - kGap / 2) + "\" y=\"" + std::to_string(kPanelH - 12) +
         "\" text-anchor=\"middle\" font-weight=\"bold\">" + xml(g.title) + "</text>\n";
    x += kGroupGap;
  }
  return s;
}

// The panels one above the other in one SVG.
std::string render(const std::vector<Panel>& panels) {
  int width = 0;
  for (const auto& p : panels) width = std::max(width, panel_width(p));
  const int height = kPanelH * static_cast<int>(panels.size());
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
                  std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " +
                  std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (size_t i = 0; i < panels.size(); ++i)
    s += "<g transform=\"translate(0," + std::to_string(static_cast<int>(i) * kPanelH) + ")\">\n" +
         render_panel(panels[i], width) + "</g>\n";
  return s + "</svg>\n";
}

// Runs grouped by model, one bar each from `bar`.
std::vector<Group> grouped(const std::vector<RunResult>& runs, const std::function<Bar(const RunResult&)>& bar) {
  std::vector<Group> groups;
  for (const auto& r : runs) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.title == r.spec.model; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{r.spec.model, {}});
    it->bars.push_back(bar(r));
  }
  return groups;
}

// A ratio bar: its value and label, or "n/a" where the run has no ratio.
Bar ratio_bar(const RunResult& r, const std::optional<double>& ratio, const std::string& cls) {
  return {bar_label(r.spec), ratio, cls, color_for(r.spec), ratio ? times(*ratio) : "n/a"};
}

Panel speedup_panel(const std::vector<RunResult>& runs) {
  return {grouped(runs, [](const RunResult& r) { return ratio_bar(r, r.speedup_vs_cpu_fp32, "bar"); }),
          "Speed-up over the CPU (float32), samples/s", "x CPU float32",
          "n/a: no CPU float32 run of that model and mode", true};
}

Panel samples_panel(const std::vector<RunResult>& runs) {
  return {grouped(runs,
                  [](const RunResult& r) {
                    return Bar{bar_label(r.spec), r.samples_per_s, "bar", color_for(r.spec),
                               fmt("%.3g", r.samples_per_s)};
                  }),
          "Samples/s", "samples/s (each model on its own scale)",
          "no accelerator run to compare with the CPU: samples/s instead of speed-ups", false};
}

Panel peer_panel(const std::vector<RunResult>& runs) {
  return {grouped(runs, [](const RunResult& r) { return ratio_bar(r, r.vs_pytorch, "bar peer"); }),
          "Kiln over PyTorch on the same device, samples/s", "x PyTorch",
          "above 1x Kiln is faster; n/a: no PyTorch number for that run", true};
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
  if (!r.skipped.empty()) return table_note(s, "skipped (" + r.skipped + ")");
  if (!r.error.empty()) {
    const auto& p = r.pytorch_samples_per_s;
    return table_note(s, "failed: " + r.error + (p ? "; PyTorch " + fmt("%.2f", *p) + " samples/s" : ""));
  }
  std::string row = pad(s.model, 11) + pad(s.mode, 6) + pad(s.device, 8) + pad(s.dtype, 6) +
                    pad(std::to_string(s.batch), 6) + pad(fmt("%.4f", r.median_s), 10) + pad(fmt("%.4f", r.min_s), 9) +
                    pad(fmt("%.4f", r.max_s), 9) + pad(fmt("%.4f", r.host_s), 9) +
                    pad(fmt("%.2f", r.samples_per_s), 11) + pad(r.tflops() ? fmt("%.3f", *r.tflops()) : "-", 9) +
                    pad(mib(r.peak_bytes), 10) +
                    pad(r.speedup_vs_cpu_fp32 ? fmt("%.2fx", *r.speedup_vs_cpu_fp32) : "-", 11);
  if (vs_pytorch)
    row += "  " + pad(r.pytorch_samples_per_s ? fmt("%.2f", *r.pytorch_samples_per_s) : "-", 11) +
           (r.vs_pytorch ? fmt("%.2f", *r.vs_pytorch) : "-");
  // What makes the numbers other than the device's own, on the row they concern.
  if (r.profiled) row += "  (profiled)";
  if (!r.pytorch_error.empty()) row += "  (PyTorch " + r.pytorch_error + ")";
  if (!r.fallbacks.empty()) {
    row += "  (ran on the cpu:";
    for (const auto& [op, n] : r.fallbacks) row += " " + op + " x" + std::to_string(n);
    row += ")";
  }
  return row;
}

std::string table_note(const RunSpec& s, const std::string& note) {
  return pad(s.model, 11) + pad(s.mode, 6) + pad(s.device, 8) + pad(s.dtype, 6) + pad(std::to_string(s.batch), 6) +
         note;
}

std::string chart_svg(const std::vector<RunResult>& runs) {
  bool any_speedup = false, any_peer = false;
  for (const auto& r : runs) {
    const bool baseline = r.spec.device == "cpu" && r.spec.dtype == "fp32";
    any_speedup = any_speedup || (r.speedup_vs_cpu_fp32 && !baseline);
    any_peer = any_peer || r.vs_pytorch;
  }
  std::vector<Panel> panels{any_speedup ? speedup_panel(runs) : samples_panel(runs)};
  if (any_peer) panels.push_back(peer_panel(runs));
  return render(panels);
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
