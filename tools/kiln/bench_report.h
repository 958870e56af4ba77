// kiln bench's output: the terminal table and the SVG bar chart (with a PNG where a converter exists).
#pragma once

#include <string>
#include <vector>

#include "tools/kiln/bench_runner.h"

namespace kiln::cli::bench {

std::string table_header(bool vs_pytorch);
std::string table_row(const RunResult& r, bool vs_pytorch);
// A row for a run without numbers: its spec, then the note ("skipped (...)", "failed: ...").
std::string table_note(const RunSpec& spec, const std::string& note);

// The chart, one bar per run (class="bar"), grouped by model:
//  - speed-up over the CPU float32 run of the same model and mode, when every run has one and
//    some run is not itself the CPU float32 run (the seed's chart);
//  - with PyTorch numbers: Kiln and PyTorch samples/s side by side (PyTorch bars class="bar peer");
//  - otherwise samples/s, each model on its own scale, with a note saying so.
std::string chart_svg(const std::vector<RunResult>& runs);

// Converts the SVG to PNG with rsvg-convert or ImageMagick's convert, when either is on the PATH.
// Returns the tool used, or "" when none was found or it failed.
std::string write_png(const std::string& svg_path, const std::string& png_path);

}  // namespace kiln::cli::bench
