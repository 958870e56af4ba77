#!/usr/bin/env python3
"""PyTorch side of `kiln bench` (issue 5): one model x mode x device x dtype run, one JSON line.

The workloads are the seed's, as Kiln runs them (tools/kiln/bench*.cpp, bench/bench_{cnn,bert}.cpp):
  CNNs (resnet50, vgg16 or any torchvision classification model): random weights, random 224x224
    images, 1000 classes, channels-last model and input; train step = forward, cross-entropy,
    backward, SGD (lr 0.01, momentum 0.9, weight decay 1e-4); eval step = forward under no_grad
    in eval().
  BERT (bert-tiny|mini|small|base, the kiln::models::BertConfig presets, vocabulary 30522):
    transformers' BertForMaskedLM with attn_implementation="sdpa", random weights and token ids,
    an all-ones attention mask, 15% of positions labelled; train step = forward with the MLM loss
    over the logits at every position (HF's forward; --mlm sparse runs the head on the labelled
    positions only, like Kiln's masked_lm_loss), backward, AdamW (lr 1e-4, weight decay 0.01);
    eval step = forward under no_grad in eval().
  sdpa: torch.nn.functional.scaled_dot_product_attention alone at BERT-base's shapes (q, k, v
    [batch, 12 heads, seq, 64], no mask, created in the run's dtype: float32, bfloat16 or
    float16); train step = forward and backward of a fixed random output gradient (no
    optimizer); eval step = forward under no_grad.
  bn-relu, maxpool: ResNet-50's batch norm + ReLU ([batch, 256, 56, 56]: nn.BatchNorm2d(256) with
    float32 parameters, then relu) and its stem max pooling ([batch, 64, 112, 112], 3x3, stride 2,
    padding 1) alone, the input channels-last in the run's dtype; train step = forward (batch
    statistics) and backward of a fixed output gradient, eval step = forward (running statistics)
    under no_grad. PyTorch runs cuDNN's batch norm in float32, its own kernels in bfloat16.
  bf16: torch.autocast(device, torch.bfloat16) around forward and loss, float32 master weights and
    optimizer; fp16 (CUDA only): the same with float16 and a GradScaler for training; tf32 (CUDA
    only): float32 with torch.backends.cuda.matmul.allow_tf32 = True (fp32 keeps PyTorch's defaults).

Timing: one untimed step under torch.utils.flop_counter.FlopCounterMode (it counts the FLOPs and
is the first warm-up step), the remaining warm-up steps, then --steps timed steps; on CUDA the
clock is read after torch.cuda.synchronize(). tflops = counted FLOPs per step / median step time.
FlopCounterMode counts matmuls (2*M*N*K: mm, addmm, bmm, linear), convolutions (forward and both
backwards) and scaled-dot-product attention (forward and backward) -- the convention of Kiln's
profiler; elementwise work, normalisation, pooling, the loss and the optimizer count as 0.
peak_bytes: torch.cuda.max_memory_allocated over the timed steps (the peak is reset first, so it
includes the weights and optimizer state held then), peak_reserved_bytes torch.cuda.max_memory_reserved
(what the run needed of the device, the cache included); both null on the CPU, where PyTorch keeps no
allocator statistics -- peak_rss_bytes is the process's RSS high-water mark (getrusage) instead.

  OMP_NUM_THREADS=2 python3 bench/pytorch_peer.py --model resnet50 --mode train --batch 16 --threads 2
  python3 bench/pytorch_peer.py --model bert-base --mode eval --batch 8 --seq 128 --dtype bf16
  python3 bench/pytorch_peer.py --model vgg16 --mode train --batch 16 --profile   # torch.profiler's top ops

Exit status: 0 ok; 1 the run failed (e.g. out of memory; one line on stderr); 2 bad arguments or
an unknown model; 3 "unsupported": a device or dtype this PyTorch cannot run; 4 PyTorch (or the
torchvision / transformers the model needs) is not installed.
"""
import argparse
import json
import platform
import re
import resource
import statistics
import sys
import time
import warnings

BERT_SIZES = {  # num_hidden_layers, hidden_size, num_attention_heads, intermediate_size (kiln::models::BertConfig presets)
    "bert-tiny": (2, 128, 2, 512),
    "bert-mini": (4, 256, 4, 1024),
    "bert-small": (4, 512, 8, 2048),
    "bert-base": (12, 768, 12, 3072),
}
BERT_VOCAB = 30522
BERT_MAX_SEQ = 512  # max_position_embeddings
NUM_CLASSES = 1000
PROG = "pytorch_peer.py"


def die(code, message):
    """One line on stderr and the given exit status (kiln bench shows the line)."""
    sys.stderr.write(f"{PROG}: {' '.join(str(message).split())}\n")
    sys.stderr.flush()
    sys.exit(code)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (exit 2), not the usage block."""

    def error(self, message):
        die(2, f"error: {message}")


def positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def device_arg(text):
    if not re.fullmatch(r"cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
    return "cuda:0" if text == "cuda" else text


def parse_args(argv):
    p = OneLineParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True,
                   help="resnet50, vgg16, any torchvision classification model, bert-tiny|mini|small|base, sdpa, "
                        "bn-relu, maxpool")
    p.add_argument("--mode", default="train", choices=["train", "eval"])
    p.add_argument("--device", default="cpu", type=device_arg, help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "tf32", "bf16", "fp16"])
    p.add_argument("--batch", type=positive, help="default: the seed's (128 CNNs, 64 VGG and BERT)")
    p.add_argument("--steps", type=positive, default=5, help="timed steps")
    p.add_argument("--warmup", type=non_negative, default=2, help="untimed steps first (at least one is run)")
    p.add_argument("--threads", type=positive, help="CPU threads (torch.set_num_threads); default: torch's")
    p.add_argument("--seq", type=positive, default=128, help="BERT's and sdpa's sequence length")
    p.add_argument("--image-size", type=positive, default=224, help="CNN image side")
    p.add_argument("--mlm", default="full", choices=["full", "sparse"],
                   help="BERT train loss: logits at every position (HF) or at the labelled ones only")
    p.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="BERT: model.gradient_checkpointing_enable() (non-reentrant), in training")
    p.add_argument("--profile", action="store_true",
                   help="print torch.profiler's per-op table for one step instead of the JSON line")
    p.add_argument("--top", type=positive, default=25, help="rows of the --profile table")
    a = p.parse_args(argv)
    a.is_bert = a.model in BERT_SIZES
    if a.model.startswith("bert") and not a.is_bert:
        die(2, f"unknown model {a.model!r} (BERT sizes: {', '.join(BERT_SIZES)})")
    if a.is_bert and a.seq > BERT_MAX_SEQ:
        die(2, f"error: --seq {a.seq} is longer than BERT's {BERT_MAX_SEQ} positions")
    if a.batch is None:
        a.batch = 64 if a.is_bert or a.model == "sdpa" or a.model.startswith("vgg") else 128
    return a


def import_torch():
    try:
        import torch
    except ImportError as e:
        die(4, f"PyTorch is not installed ({e}); pip install torch torchvision transformers")
    return torch


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions(torch):
    """torch / oneDNN / CUDA / cuDNN versions where this build knows them."""
    m = re.search(r"MKL-DNN v([\d.]+)", torch.__config__.show())
    cudnn = None
    if torch.backends.cudnn.is_available():
        v = torch.backends.cudnn.version()  # e.g. 92600 = 9.26.0
        cudnn = f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v else None
    return {"version": torch.__version__, "onednn": m.group(1) if m else None,
            "cuda": torch.version.cuda, "cudnn": cudnn}


def check_supported(torch, a):
    """Exit 3 for a device or dtype this PyTorch cannot run."""
    if a.device.startswith("cuda"):
        if not torch.cuda.is_available():
            die(3, f"unsupported: {a.device}: CUDA is not available to torch {torch.__version__}")
        index = int(a.device.split(":")[1])
        if index >= torch.cuda.device_count():
            die(3, f"unsupported: {a.device}: only {torch.cuda.device_count()} CUDA device(s)")
        if a.dtype == "bf16" and not torch.cuda.is_bf16_supported():
            die(3, f"unsupported: bf16 on {torch.cuda.get_device_name(index)}")
    else:
        if a.dtype == "fp16":
            die(3, "unsupported: fp16 on the CPU (autocast float16 training needs CUDA here)")
        if a.dtype == "tf32":
            die(3, "unsupported: tf32 on the CPU (a GPU format)")
        if a.dtype == "bf16" and not (torch.backends.mkldnn.is_available()
                                      and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
            die(3, "unsupported: bf16 on this CPU (oneDNN reports no bfloat16 support)")


def make_cnn(torch, a, device):
    try:
        import torchvision
    except ImportError as e:
        die(4, f"torchvision is not installed ({e}); pip install torchvision")
    if a.model not in torchvision.models.list_models(module=torchvision.models):
        die(2, f"unknown model {a.model!r} (not a torchvision classification model or {'/'.join(BERT_SIZES)})")
    model = torchvision.models.get_model(a.model, weights=None, num_classes=NUM_CLASSES)
    model = model.to(device=device, memory_format=torch.channels_last)
    model.train(a.mode == "train")
    x = torch.randn(a.batch, 3, a.image_size, a.image_size, device=device).contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(0, NUM_CLASSES, (a.batch,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

    def loss_fn():
        out = model(x)
        if isinstance(out, tuple):  # inception/googlenet aux outputs in train(): the main logits
            out = out[0]
        return torch.nn.functional.cross_entropy(out, y)

    return model, opt, loss_fn, lambda: model(x), {"torchvision": torchvision.__version__,
                                                    "image_size": a.image_size, "optimizer": "sgd"}


def make_bert(torch, a, device):
    try:
        import transformers
        from transformers import BertConfig, BertForMaskedLM
    except ImportError as e:
        die(4, f"transformers is not installed ({e}); pip install transformers")
    transformers.logging.set_verbosity_error()
    layers, hidden, heads, inter = BERT_SIZES[a.model]
    cfg = BertConfig(vocab_size=BERT_VOCAB, num_hidden_layers=layers, hidden_size=hidden,
                     num_attention_heads=heads, intermediate_size=inter, attn_implementation="sdpa")
    model = BertForMaskedLM(cfg).to(device)
    if a.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train(a.mode == "train")
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device=device)
    mask = torch.ones(a.batch, a.seq, dtype=torch.int64, device=device)
    labels = torch.where(torch.rand(a.batch, a.seq, device=device) < 0.15, ids, torch.full_like(ids, -100))
    picked = (labels != -100).flatten().nonzero().squeeze(1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)

    def loss_fn():
        if a.mlm == "full":
            return model(input_ids=ids, attention_mask=mask, labels=labels).loss
        hidden_states = model.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        logits = model.cls(hidden_states.flatten(0, 1).index_select(0, picked))
        return torch.nn.functional.cross_entropy(logits, labels.flatten()[picked])

    return model, opt, loss_fn, lambda: model(input_ids=ids, attention_mask=mask), {
        "transformers": transformers.__version__, "seq": a.seq, "optimizer": "adamw",
        "mlm": a.mlm if a.mode == "train" else None,
        **({"gradient_checkpointing": True} if a.gradient_checkpointing and a.mode == "train" else {})}


SDPA_HEADS, SDPA_HEAD_DIM = 12, 64  # BERT-base's attention


def make_sdpa_step(torch, a, device):
    """The attention alone (kiln bench's "sdpa" workload): its step function and extra fields."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.dtype, torch.float32)
    if a.dtype == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
    shape = (a.batch, SDPA_HEADS, a.seq, SDPA_HEAD_DIM)
    train = a.mode == "train"
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=train) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if train:
        grad = torch.randn(shape, device=device, dtype=dtype)

        def step():
            for x in (q, k, v):
                x.grad = None
            sdpa(q, k, v).backward(grad)
    else:
        def step():
            with torch.no_grad():
                sdpa(q, k, v)
    return step, {"seq": a.seq, "optimizer": "none"}


def make_cnn_op_step(torch, a, device):
    """ResNet-50's batch norm + ReLU or max pooling alone (kiln bench's "bn-relu", "maxpool")."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.dtype, torch.float32)
    bn = a.model == "bn-relu"
    shape = (a.batch, 256, 56, 56) if bn else (a.batch, 64, 112, 112)
    train = a.mode == "train"
    x = torch.randn(shape, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last)
    x.requires_grad_(train)
    norm = torch.nn.BatchNorm2d(256).to(device).train(train) if bn else None

    def forward():
        return torch.nn.functional.relu(norm(x)) if bn else torch.nn.functional.max_pool2d(x, 3, 2, 1)

    if train:
        grad = torch.randn(forward().shape, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last)

        def step():
            x.grad = None
            if norm is not None:
                norm.zero_grad(set_to_none=True)
            forward().backward(grad)
    else:
        def step():
            with torch.no_grad():
                forward()
    return step, {"optimizer": "none"}


def make_step(torch, a, device):
    """The model, data and optimizer as one step function, plus the run's extra JSON fields."""
    torch.manual_seed(0)
    if a.model == "sdpa":
        return make_sdpa_step(torch, a, device)
    if a.model in ("bn-relu", "maxpool"):
        return make_cnn_op_step(torch, a, device)
    make = make_bert if a.is_bert else make_cnn
    model, opt, loss_fn, forward, extra = make(torch, a, device)
    amp_dtype = {"fp32": None, "tf32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    if a.dtype == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
    autocast = (lambda: torch.autocast(device.type, dtype=amp_dtype)) if amp_dtype else None
    scaler = torch.amp.GradScaler(device.type) if a.dtype == "fp16" and a.mode == "train" else None

    def cast():
        return autocast() if autocast else torch.autocast(device.type, enabled=False)

    if a.mode == "train":
        def step():
            opt.zero_grad(set_to_none=True)
            with cast():
                loss = loss_fn()
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
    else:
        def step():
            with torch.no_grad(), cast():
                forward()
    return step, extra


def run(torch, a, device):
    from torch.utils.flop_counter import FlopCounterMode

    step, extra = make_step(torch, a, device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    if a.profile:
        step()  # warm-up outside the profile
        sync()
        acts = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as prof:
            step()
            sync()
        key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=a.top), flush=True)
        return None
    counter = FlopCounterMode(display=False)
    with counter:  # the first warm-up step: FLOPs per step from the model's layers
        step()
    flops = counter.get_total_flops()
    for _ in range(a.warmup - 1):
        step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times, host = [], []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        host.append(time.perf_counter() - t0)  # the step queued (on a GPU), as kiln bench's host_s
        sync()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    peak_reserved = torch.cuda.max_memory_reserved(device) if device.type == "cuda" else None
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    result = {
        "framework": "pytorch", "model": a.model, "mode": a.mode, "device": a.device,
        "device_name": gpu or cpu_name(), "dtype": a.dtype, "batch": a.batch, "steps": a.steps,
        "warmup": max(a.warmup, 1), "median_s": med, "min_s": min(times), "max_s": max(times),
        "host_s": statistics.median(host), "samples_per_s": a.batch / med, "flops_per_step": flops, "tflops": flops / med / 1e12,
        "peak_bytes": peak, "peak_reserved_bytes": peak_reserved, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "cpu": cpu_name(), "threads": torch.get_num_threads(), "gpu": gpu, "commit": None,
        "torch": torch.__version__,
    }
    result.update(versions(torch))
    result.update(extra)
    if device.type == "cuda":
        result["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        result["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
    return result


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    torch = import_torch()
    warnings.filterwarnings("ignore")  # stderr stays for errors; stdout holds only the JSON line
    check_supported(torch, a)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        result = run(torch, a, device)
    except torch.cuda.OutOfMemoryError as e:
        die(1, f"out of memory: {a.model} {a.mode} batch {a.batch} on {a.device}: {str(e).splitlines()[0]}")
    except (RuntimeError, ValueError, MemoryError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        die(1, f"{a.model} {a.mode} batch {a.batch} on {a.device} {a.dtype} failed: {first}")
    if result is not None:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
