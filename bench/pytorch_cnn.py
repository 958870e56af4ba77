#!/usr/bin/env python3
"""PyTorch side of the CPU CNN benchmark (issue 3, Speed): ResNet-50 / VGG-16 train and eval steps.

Float32, channels-last, random weights and data, a fixed thread count; prints one JSON line per
(model, mode) with the median step time and images/s, for comparison with Kiln at the same batch.

  OMP_NUM_THREADS=2 python3 bench/pytorch_cnn.py --models resnet50,vgg16 --modes train,eval --batch 16
  python3 bench/pytorch_cnn.py --models resnet50 --modes train --batch 16 --profile   # top ops
The seed's batches are 128 (ResNet-50) and 64 (VGG-16); --batch takes any size.
"""
import argparse
import json
import platform
import statistics
import time

import torch
import torch.nn.functional as F
import torchvision


def make(name: str, num_classes: int) -> torch.nn.Module:
    return getattr(torchvision.models, name)(num_classes=num_classes).to(memory_format=torch.channels_last)


def step_fn(model, opt, x, y, mode):
    if mode == "train":
        def step():
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    else:
        def step():
            with torch.no_grad():
                model(x)
    return step


def setup(name, mode, batch, size, num_classes):
    """The model, a random batch and the optimizer, as one step function."""
    torch.manual_seed(0)
    model = make(name, num_classes)
    model.train(mode == "train")
    x = torch.randn(batch, 3, size, size).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, num_classes, (batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    return step_fn(model, opt, x, y, mode)


def bench(name, mode, batch, size, warmup, steps, num_classes):
    step = setup(name, mode, batch, size, num_classes)
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"framework": "pytorch", "torch": torch.__version__, "model": name, "mode": mode, "batch": batch,
            "image_size": size, "threads": torch.get_num_threads(), "warmup": warmup, "steps": steps,
            "median_step_s": round(med, 4), "min_step_s": round(min(times), 4),
            "images_per_s": round(batch / med, 2), "cpu": platform.processor() or platform.machine()}


def profile(name, mode, batch, size, num_classes, top):
    step = setup(name, mode, batch, size, num_classes)
    step()  # warm-up outside the profile
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet50,vgg16")
    p.add_argument("--modes", default="train,eval")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--profile", action="store_true", help="print torch.profiler's top ops instead of timing")
    p.add_argument("--top", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    for name in a.models.split(","):
        for mode in a.modes.split(","):
            if a.profile:
                profile(name, mode, a.batch, a.image_size, a.num_classes, a.top)
            else:
                print(json.dumps(bench(name, mode, a.batch, a.image_size, a.warmup, a.steps, a.num_classes)),
                      flush=True)


if __name__ == "__main__":
    main()
