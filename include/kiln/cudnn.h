// kiln::cudnn: cuDNN's switches, as torch.backends.cudnn — TF32 for float32 convolutions and the
// benchmark mode. No cuDNN header is needed to use them; in a build without cuDNN they are kept
// and change nothing.
#pragma once

namespace kiln::cudnn {

// Whether float32 convolutions on a GPU may use TF32 tensor cores (10-bit mantissa products,
// float32 sums): on by default, as torch.backends.cudnn.allow_tf32 — unlike matmuls, whose TF32
// switch is kiln::cuda::set_allow_tf32 and off by default, as in PyTorch.
void set_allow_tf32(bool allow);
bool allow_tf32();

// With benchmark on, the first convolution of each geometry times cuDNN's algorithms on the real
// operands and keeps the fastest (torch.backends.cudnn.benchmark); off (the default), cuDNN's
// heuristics choose without running anything. Either choice is made once per geometry.
void set_benchmark(bool enabled);
bool benchmark();

// With deterministic on (Kiln's default), a convolution takes a deterministic algorithm whenever
// cuDNN has one that fits: the same bits on every run, as torch.backends.cudnn.deterministic =
// True. Off (PyTorch's default), it takes cuDNN's first choice (its heuristics' top, or the fastest
// timed), which for some weight gradients sums with atomics: faster, with bits that may change
// from run to run (`kiln bench --cudnn-nondeterministic` times it).
void set_deterministic(bool enabled);
bool deterministic();

}  // namespace kiln::cudnn
