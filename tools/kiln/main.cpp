// The kiln command: dispatches to one subcommand per file. Exit status: 0 on success and for
// --help, 1 on any error, which is one line on stderr.
#include <cstring>
#include <iostream>
#include <string>

#include "kiln/distributed.h"
#include "kiln/error.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kiln::cli::usage("");
    return 1;
  }
  const std::string cmd = argv[1];
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    std::cout << kiln::cli::usage(argc > 2 ? argv[2] : "");
    return 0;
  }
  try {
    if (cmd == "info") return kiln::cli::info(argc - 1, argv + 1);
    if (cmd == "train") return kiln::cli::train(argc - 1, argv + 1);
    if (cmd == "eval") return kiln::cli::eval(argc - 1, argv + 1);
    if (cmd == "bench") return kiln::cli::bench_command(argc - 1, argv + 1);
    std::cerr << "kiln: error: unknown command '" << cmd << "' (kiln help lists the commands)\n";
    return 1;
  } catch (const kiln::cli::HelpRequested& h) {
    std::cout << kiln::cli::usage(h.command);
    return 0;
  } catch (const std::exception& e) {
    // In a job of several processes the others would wait on this one: end them all.
    if (kiln::distributed::world_size() > 1) kiln::distributed::abort(e.what());
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  }
}
