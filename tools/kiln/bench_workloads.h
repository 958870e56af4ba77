// The workloads `kiln bench` times: CNN and BERT train/eval steps on synthetic inputs, and the two
// hooks that other parts of Kiln fill in (bf16 autocast, the profiler's FLOP count).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "kiln/device.h"

namespace kiln::cli::bench {

// True for the BERT presets bench knows (bert-tiny, bert-mini, bert-small, bert-base).
bool is_bert(const std::string& model);
// True for "bn-relu" and "maxpool", ResNet-50's batch norm + ReLU and max pooling alone.
bool is_cnn_op(const std::string& model);
// True for the workloads with a sequence length (--seq): BERT and "sdpa".
bool takes_seq(const std::string& model);
// Throws kiln::Error "[kiln bench] unknown model ..." listing the known names.
void check_model(const std::string& model);

struct WorkloadOptions {
  std::string model;  // a models::create() name or a BERT preset
  std::string mode;   // "train" or "eval"
  Device device;
  int64_t batch = 1;
  int64_t seq = 128;           // BERT and sdpa only
  std::string dtype = "fp32";  // fp16 training steps use a GradScaler (as PyTorch's peer does)
  bool gradient_checkpointing = false;  // BERT: BertConfig::gradient_checkpointing
};

// One step of the workload, ready to run. Its inputs, model and optimizer live in the closure.
// CNNs: random 224x224 channels-last images and labels over 1000 classes; train = forward,
// cross-entropy, backward, SGD (lr 0.01, momentum 0.9, weight decay 1e-4); eval = forward under
// NoGradGuard with model.eval(). BERT: BertForMaskedLM on random token ids, 15% of the positions
// labelled; train = the MLM loss on the full logits (as Hugging Face's BertForMaskedLM computes it)
// + backward + AdamW (lr 1e-4, weight decay 0.01); eval = forward under NoGradGuard. "sdpa": the
// fused attention alone at BERT-base's shapes (q, k, v [batch, 12 heads, seq, 64], no mask, in
// the run's dtype: float32, or bfloat16/float16 for bf16/fp16); train = forward and backward
// (no optimizer), eval = forward under NoGradGuard. "bn-relu" and "maxpool": ResNet-50's batch
// norm + ReLU ([batch, 256, 56, 56]) and stem max pooling ([batch, 64, 112, 112]) alone,
// channels-last in the run's dtype, the same way (bench_workloads.cpp).
struct Workload {
  std::function<void()> step;
  std::string optimizer;  // "sgd", "adamw" or "none"
};
Workload make_workload(const WorkloadOptions& options);

// The dtypes bench runs: fp32, tf32 (float32 with TF32 matmuls on a GPU), bf16 and fp16 (autocast).
// An unknown one is a kiln::Error naming them.
void check_dtype(const std::string& dtype);
// Runs fn in fp32, with TF32 allowed, or under bf16/fp16 autocast.
void run_with_dtype(const std::string& dtype, const std::function<void()>& fn);

// The FLOPs of fn as kiln::profiler counts them (matmul, linear, conv and attention work).
std::optional<double> count_flops(const std::function<void()>& fn);

}  // namespace kiln::cli::bench
