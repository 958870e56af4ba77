// The subcommands of the kiln command; each takes the arguments after the command name.
#pragma once

#include <string>

namespace kiln::cli {
int info(int argc, char** argv);
int train(int argc, char** argv);
int eval(int argc, char** argv);
int bench_command(int argc, char** argv);
// A subcommand's help text ("train", ...), or the overview for any other name.
const char* usage(const std::string& command);
}  // namespace kiln::cli
