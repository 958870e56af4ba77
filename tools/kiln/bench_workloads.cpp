// kiln bench's workloads (moved here from bench/bench_cnn.cpp and bench/bench_bert.cpp), and the
// autocast/profiler hooks, compiled in when their headers exist.
#include "tools/kiln/bench_workloads.h"

#include <memory>

#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/nn/functional.h"
#include "kiln/optim.h"

#include "kiln/autocast.h"
#include "kiln/profiler.h"
#include "kiln/train/mixed_precision.h"

namespace kiln::cli::bench {

namespace {
constexpr int64_t kImageSize = 224;

// backward and the optimizer's step as `kiln train --amp` takes them: fp16 through a GradScaler.
std::shared_ptr<train::MixedPrecision> step_precision(const std::string& dtype) {
  return std::make_shared<train::MixedPrecision>(dtype == "fp16" ? "fp16" : "off", "kiln bench");
}
constexpr int64_t kNumClasses = 1000;

bool is_cnn(const std::string& model) {
  for (const auto& n : models::model_names())
    if (n == model) return true;
  return false;
}

Workload cnn_workload(const WorkloadOptions& o) {
  auto model = std::make_shared<nn::AnyModule>(models::create(o.model, kNumClasses));
  (*model)->to(MemoryFormat::ChannelsLast);  // weights in the activations' layout, as bench/pytorch_peer.py's model
  (*model)->to(o.device);                    // (which keeps it: laid out once, on the host)
  (*model)->train(o.mode == "train");
  // The small CNN takes Fashion-MNIST's images; the others ImageNet's.
  const Shape image = o.model == "small_cnn" ? Shape{1, 28, 28} : Shape{3, kImageSize, kImageSize};
  Tensor x = randn({o.batch, image[0], image[1], image[2]}).to(o.device).contiguous(MemoryFormat::ChannelsLast);
  Tensor y = randint(0, kNumClasses, {o.batch}).to(o.device);
  if (o.mode == "eval") {
    return {[model, x] {
              NoGradGuard ng;
              (*model)(x);
            },
            "none"};
  }
  auto opt = std::make_shared<optim::SGD>((*model)->parameters(),
                                          optim::SGDOptions{.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4});
  return {[model, opt, x, y, amp = step_precision(o.dtype)] {
            opt->zero_grad();
            Tensor loss = nn::functional::cross_entropy((*model)(x), y);
            amp->backward_and_step(loss, *opt);
          },
          "sgd"};
}

Workload bert_workload(const WorkloadOptions& o) {
  models::BertConfig cfg = models::BertConfig::preset(o.model);
  cfg.gradient_checkpointing = o.gradient_checkpointing;
  KILN_CHECK(o.seq >= 1 && o.seq <= cfg.max_position_embeddings, "kiln bench", "--seq must be in [1, ",
             cfg.max_position_embeddings, "] for ", o.model, ", got ", o.seq);
  auto model = std::make_shared<models::BertForMaskedLM>(models::bert_for_masked_lm(cfg));
  (*model)->to(o.device);
  (*model)->train(o.mode == "train");
  Tensor ids = randint(0, cfg.vocab_size, {o.batch, o.seq});
  Tensor mask = ones({o.batch, o.seq}, kInt64);
  // HF's MLM recipe labels 15% of the positions; the rest are ignored (-100).
  Tensor labels = where(lt(rand({o.batch, o.seq}), 0.15), ids, full({o.batch, o.seq}, -100, kInt64));
  ids = ids.to(o.device);
  mask = mask.to(o.device);
  labels = labels.to(o.device);
  if (o.mode == "eval") {
    return {[model, ids, mask] {
              NoGradGuard ng;
              (*model)(ids, mask);
            },
            "none"};
  }
  auto opt = std::make_shared<optim::AdamW>((*model)->parameters(), optim::AdamWOptions{.lr = 1e-4, .weight_decay = 0.01});
  // The loss over the full logits, as Hugging Face's BertForMaskedLM computes it (and so
  // bench/pytorch_peer.py), not the cheaper masked_lm_loss over the labelled positions only.
  return {[model, opt, ids, mask, labels, amp = step_precision(o.dtype)] {
            opt->zero_grad();
            Tensor loss = models::BertForMaskedLMImpl::loss((*model)(ids, mask), labels);
            amp->backward_and_step(loss, *opt);
          },
          "adamw"};
}
// The 16-bit type a bench dtype computes in (bf16, fp16), or float32 (fp32, tf32).
ScalarType compute_type(const std::string& dtype) {
  return dtype == "bf16" ? kBFloat16 : dtype == "fp16" ? kFloat16 : kFloat32;
}

// BERT-base's attention: 12 heads of 64.
constexpr int64_t kSdpaHeads = 12, kSdpaHeadDim = 64;

Workload sdpa_workload(const WorkloadOptions& o) {
  KILN_CHECK(o.seq >= 1, "kiln bench", "--seq must be at least 1, got ", o.seq);
  const ScalarType t = compute_type(o.dtype);
  const Shape shape{o.batch, kSdpaHeads, o.seq, kSdpaHeadDim};
  const bool train = o.mode == "train";
  auto input = [&] { return randn(shape).to(t).to(o.device).requires_grad_(train); };
  Tensor q = input(), k = input(), v = input();
  if (!train) {
    return {[q, k, v] {
              NoGradGuard ng;
              scaled_dot_product_attention(q, k, v);
            },
            "none"};
  }
  Tensor grad = randn(shape).to(t).to(o.device);
  return {[q, k, v, grad] {
            for (Tensor x : {q, k, v}) x.set_grad(Tensor());  // as PyTorch's peer: set to none
            scaled_dot_product_attention(q, k, v).backward(grad);
          },
          "none"};
}

// ResNet-50's memory-bound ops alone, channels-last, in the run's dtype (float32 parameters): the
// batch norm and ReLU after its first stage (256 channels at 56 x 56) and its stem's max pooling
// (3 x 3, stride 2, padding 1, over 64 channels at 112 x 112). On CUDA these are Kiln's own
// kernels; PyTorch's peer runs cuDNN's batch norm in float32 and its native kernels in 16 bits.
// train = forward (batch statistics) and backward of a fixed output gradient, eval = forward
// (running statistics) under NoGradGuard; no optimizer.
Workload cnn_op_workload(const WorkloadOptions& o) {
  const bool bn = o.model == "bn-relu", train = o.mode == "train";
  const Shape shape = bn ? Shape{o.batch, 256, 56, 56} : Shape{o.batch, 64, 112, 112};
  Tensor x = randn(shape).to(compute_type(o.dtype)).to(o.device).contiguous(MemoryFormat::ChannelsLast);
  x.requires_grad_(train);
  std::shared_ptr<nn::BatchNorm2d> norm;
  if (bn) {
    norm = std::make_shared<nn::BatchNorm2d>(256);
    (*norm)->to(o.device);
    (*norm)->train(train);
  }
  auto forward = [norm, x] { return norm ? (*norm)->forward_relu(x) : max_pool2d(x, {3, 3}, {2, 2}, {1, 1}); };
  if (!train) {
    return {[forward] {
              NoGradGuard ng;
              forward();
            },
            "none"};
  }
  Tensor y = forward();
  Tensor grad = randn(y.shape()).to(y.dtype()).to(o.device).contiguous(MemoryFormat::ChannelsLast);
  return {[forward, grad, norm, x]() mutable {
            x.set_grad(Tensor());  // as the peer: set to none
            if (norm)
              for (Tensor t : {(*norm)->weight, (*norm)->bias}) t.set_grad(Tensor());
            forward().backward(grad);
          },
          "none"};
}
}  // namespace

bool is_cnn_op(const std::string& model) { return model == "bn-relu" || model == "maxpool"; }

bool is_bert(const std::string& model) {
  return model == "bert-tiny" || model == "bert-mini" || model == "bert-small" || model == "bert-base";
}

bool takes_seq(const std::string& model) { return is_bert(model) || model == "sdpa"; }

void check_model(const std::string& model) {
  if (takes_seq(model) || is_cnn(model) || is_cnn_op(model)) return;
  std::string known = "sdpa, bn-relu, maxpool, bert-tiny, bert-mini, bert-small, bert-base";
  for (const auto& n : models::model_names()) known += ", " + n;
  KILN_FAIL("kiln bench", "unknown model '", model, "'; known models: ", known);
}

Workload make_workload(const WorkloadOptions& o) {
  check_model(o.model);
  KILN_CHECK(o.mode == "train" || o.mode == "eval", "kiln bench", "unknown mode '", o.mode, "' (train or eval)");
  KILN_CHECK(o.batch >= 1, "kiln bench", "batch must be at least 1, got ", o.batch);
  manual_seed(0);
  if (o.model == "sdpa") return sdpa_workload(o);
  if (is_cnn_op(o.model)) return cnn_op_workload(o);
  return is_bert(o.model) ? bert_workload(o) : cnn_workload(o);
}

void check_dtype(const std::string& dtype) {
  KILN_CHECK(dtype == "fp32" || dtype == "tf32" || dtype == "bf16" || dtype == "fp16", "kiln bench", "unknown dtype '",
             dtype, "' (fp32, tf32, bf16 or fp16)");
}

void run_with_dtype(const std::string& dtype, const std::function<void()>& fn) {
  check_dtype(dtype);
  if (dtype == "fp32") return fn();
  if (dtype == "tf32") {
    struct Tf32 {  // restored however fn ends
      bool prev = cuda::allow_tf32();
      Tf32() { cuda::set_allow_tf32(true); }
      ~Tf32() { cuda::set_allow_tf32(prev); }
    } tf32;
    return fn();
  }
  AutocastGuard guard(compute_type(dtype), /*enabled=*/true);
  fn();
}

std::optional<double> count_flops(const std::function<void()>& fn) {
  profiler::Session session({.timing = false});
  fn();
  return session.total_flops();
}

}  // namespace kiln::cli::bench
