// The subcommands of the kiln command; each takes the arguments after the command name.
#pragma once

namespace kiln::cli {
int info(int argc, char** argv);
int train(int argc, char** argv);
int eval(int argc, char** argv);
int bench_command(int argc, char** argv);
}  // namespace kiln::cli
