// The kiln command's help texts: one per subcommand, and the overview that lists them.
#include "tools/kiln/commands.h"

namespace kiln::cli {

const char* usage(const std::string& command) {
  if (command == "train")
    return "usage: kiln train [options]\n"
           "  Trains a model on Fashion-MNIST (default: the small CNN, 3 epochs, the best device) or,\n"
           "  with --model bert-*, pre-trains BERT with masked LM on a text corpus (default: Debian's fortunes).\n"
           "  --model NAME          small_cnn, resnet18/34/50/101, vgg11/13/16/19[_bn], bert-tiny/mini/small/base\n"
           "  --epochs N --batch-size N --lr X --weight-decay X --seed N --max-steps N\n"
           "  --device cpu|cuda[:N] (default: a GPU that runs every op of the job natively, else the CPU)\n"
           "  --amp bf16|fp16       mixed precision: autocast, and for fp16 a gradient scaler (default off)\n"
           "  --data DIR|FILE       MNIST-format IDX files (CNNs) or a text file or directory (BERT)\n"
           "  --checkpoint-dir DIR  (default checkpoints) --resume  continue exactly from the last checkpoint\n"
           "                        (with the checkpoint's settings, trainer, model and data, unless --data)\n"
           "  --no-verify           resume from a checkpoint whose checksum does not match (or is absent)\n"
           "  --threads N           CPU threads (at most the CPUs this process may use)\n"
           "  --memory-limit SIZE   CPU memory limit: 20G, 512M, 80% or 0 for none (default 90% of memory)\n"
           "  --gpu-memory-limit SIZE  each GPU's: 20G, 80% (of its memory) or 0 for none (the default)\n"
           "  CNNs only: --momentum X (the one-cycle's top momentum, default 0.95) --checkpoint-every STEPS\n"
           "             --workers N (data-loading threads)\n"
           "  BERT only: --vocab FILE --vocab-size N --seq-len N --warmup FRACTION --clip X --eval-every STEPS\n"
           "             --gradient-checkpointing (each layer's activations computed again in backward: less\n"
           "             memory, about a third more compute; with --resume too)\n";
  if (command == "eval")
    return "usage: kiln eval --checkpoint PATH [options]\n"
           "  A checkpoint's test accuracy (CNN) or held-out loss and perplexity (BERT).\n"
           "  --data DIR|FILE --device D --threads N --memory-limit SIZE --gpu-memory-limit SIZE\n"
           "  --no-verify           load a checkpoint whose checksum does not match (or is absent)\n";
  if (command == "bench")
    return "usage: kiln bench [options]\n"
           "  Times training and evaluation steps (default: resnet50, bert-base, vgg16; train and eval; cpu and\n"
           "  every cuda:N; fp32) and writes DIR/results.jsonl and DIR/chart.svg (speed-up over the CPU; with\n"
           "  --vs-pytorch also Kiln over PyTorch). The CPU skips tf32 and fp16, with the reason.\n"
           "  models: resnet18/34/50/101, vgg*, small_cnn, bert-tiny/mini/small/base, sdpa (the attention alone),\n"
           "  bn-relu, maxpool (ResNet-50's batch norm + ReLU and max pooling alone)\n"
           "  --models A,B --modes train,eval --devices cpu,cuda:0 --dtypes fp32,tf32,bf16,fp16 --batch N --steps N\n"
           "  --warmup N --seq N --out DIR --quick --profile --threads N --memory-limit SIZE --gpu-memory-limit SIZE\n"
           "  --vs-pytorch [--pytorch-script PATH] [--python PYTHON] [--pytorch-timeout SECONDS]\n"
           "                     PyTorch's run after each (--warmup 0 refused; a run past 1800 s is stopped)\n"
           "  --cudnn-benchmark  time cuDNN's convolution algorithms per shape (PyTorch's cudnn.benchmark, both "
           "sides)\n"
           "  --cudnn-nondeterministic  Kiln's convolutions may take cuDNN's nondeterministic algorithms (PyTorch's "
           "default; Kiln's is deterministic)\n"
           "  --gradient-checkpointing  BERT's training steps with each encoder layer checkpointed (both sides)\n";
  if (command == "info")
    return "usage: kiln info\n"
           "  Version, CPU, devices, threads, memory, and which backends are built.\n";
  return "usage: kiln <command> [options]   (kiln <command> --help for its options)\n\n"
         "commands:\n"
         "  train   train a CNN on Fashion-MNIST, or pre-train BERT with masked LM\n"
         "  eval    a checkpoint's test accuracy or held-out perplexity\n"
         "  bench   time training and evaluation of ResNet-50, BERT-base and VGG-16 on every device\n"
         "  info    version, devices, CPU features, threads, and which backends are built\n"
         "  help    this text\n\n"
         "Exit status: 0 on success (and for --help), 1 on any error, with one line on stderr.\n";
}

}  // namespace kiln::cli
