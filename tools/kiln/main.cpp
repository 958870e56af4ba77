// The kiln command: dispatches to one subcommand per file; errors are one line and exit 1.
#include <cstring>
#include <iostream>
#include <string>

#include "kiln/error.h"
#include "tools/kiln/commands.h"

namespace {
void usage(std::ostream& os) {
  os << "usage: kiln <command> [options]\n\n"
        "commands:\n"
        "  train   train a model on Fashion-MNIST (default: the small CNN, 3 epochs, best device)\n"
        "          --model NAME --epochs N --batch-size N --lr X --momentum X --weight-decay X\n"
        "          --device cpu|cuda[:N] --data DIR --seed N --checkpoint-dir DIR\n"
        "          --checkpoint-every STEPS --workers N --threads N --max-steps N --resume\n"
        "          or pre-train BERT with masked LM on a text corpus (default: Debian's fortunes)\n"
        "          --model bert-tiny|bert-mini|bert-small|bert-base --data FILE|DIR --vocab FILE\n"
        "          --vocab-size N --seq-len N --warmup FRACTION --clip X --eval-every STEPS\n"
        "  eval    a checkpoint's test accuracy (CNN) or held-out loss and perplexity (BERT):\n"
        "          --checkpoint PATH [--data DIR|FILE] [--device D]\n"
        "  bench   time training and evaluation steps (default: resnet50, bert-base, vgg16; train and eval;\n"
        "          cpu and every cuda:N; fp32) and write DIR/results.jsonl and DIR/chart.svg\n"
        "          --models A,B --modes train,eval --devices cpu,cuda:0 --dtypes fp32,bf16 --batch N\n"
        "          --steps N --warmup N --threads N --seq N --out DIR --quick --profile\n"
        "          --vs-pytorch [--pytorch-script PATH] [--python PYTHON]\n"
        "  info    version, devices, CPU features, threads, and which backends are built\n"
        "  help    this text\n";
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "--help") == 0) {
    usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "info") return kiln::cli::info(argc - 1, argv + 1);
    if (cmd == "train") return kiln::cli::train(argc - 1, argv + 1);
    if (cmd == "eval") return kiln::cli::eval(argc - 1, argv + 1);
    if (cmd == "bench") return kiln::cli::bench_command(argc - 1, argv + 1);
    std::cerr << "kiln: unknown command '" << cmd << "'\n";
    usage(std::cerr);
    return 2;
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  }
}
