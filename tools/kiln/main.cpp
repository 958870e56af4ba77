// The kiln command: dispatches to one subcommand per file. Exit status: 0 on success and for
// --help, 1 on any error, which is one line on stderr.
#include <cstring>
#include <iostream>
#include <string>

#include "kiln/distributed.h"
#include "kiln/error.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
};
constexpr Command kCommands[] = {{"info", kiln::cli::info},
                                 {"train", kiln::cli::train},
                                 {"eval", kiln::cli::eval},
                                 {"bench", kiln::cli::bench_command}};

const Command* find_command(const std::string& name) {
  for (const Command& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

int unknown_command(const std::string& name) {
  std::cerr << "kiln: error: unknown command '" << name << "' (kiln help lists the commands)\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {  // an error: one line, as every other (the usage goes to `kiln help`)
    std::cerr << "kiln: error: no command given (kiln help lists the commands)\n";
    return 1;
  }
  const std::string cmd = argv[1];
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    const std::string topic = argc > 2 ? argv[2] : "";
    if (!topic.empty() && !find_command(topic)) return unknown_command(topic);
    std::cout << kiln::cli::usage(topic);
    return 0;
  }
  const Command* command = find_command(cmd);
  if (!command) return unknown_command(cmd);
  try {
    return command->run(argc - 1, argv + 1);
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
