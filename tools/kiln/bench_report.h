// kiln bench's output: the terminal table and the SVG bar chart (with a PNG where a converter exists).
#pragma once

#include <string>
#include <vector>

#include "tools/kiln/bench_runner.h"

namespace kiln::cli::bench {

std::string table_header(bool vs_pytorch);
// A run's row; for a run that failed or was skipped, its spec and why (and PyTorch's samples/s
// where the peer ran).
std::string table_row(const RunResult& r, bool vs_pytorch);
// A row for a run without numbers: its spec, then the note ("skipped (...)", "failed: ...").
std::string table_note(const RunSpec& spec, const std::string& note);

// The chart: one or two panels, one above the other, each with a bar per run grouped by model,
// and "n/a" in place of a bar where a run has no value:
//  - speed-up over the CPU float32 run of the same model and mode (class="bar"), when some run
//    other than a CPU float32 one has one (the seed's chart); otherwise samples/s (class="bar"),
//    each model on its own scale, with a note saying so;
//  - with PyTorch numbers, below it: Kiln over PyTorch on the same device (class="bar peer").
std::string chart_svg(const std::vector<RunResult>& runs);

// Converts the SVG to PNG with rsvg-convert or ImageMagick's convert, when either is on the PATH.
// Returns the tool used, or "" when none was found or it failed.
std::string write_png(const std::string& svg_path, const std::string& png_path);

}  // namespace kiln::cli::bench
