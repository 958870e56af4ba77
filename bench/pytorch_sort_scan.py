#!/usr/bin/env python3
"""PyTorch's side of BM_SortAndScan (bench/bench_elementwise.cpp), the same cases in the same order.

Prints the median time of each case in milliseconds, on the CPU with torch's default threads
(run it with the same OMP_NUM_THREADS as the benchmark). Needs torch (not CI).

Run: python3 bench/pytorch_sort_scan.py
"""
import statistics
import time

import torch


def cases():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)
    a, b, c, d, e = r(128, 1000), r(8192, 30522), r(1024, 1024), r(1 << 22), r(64, 128, 768)
    return [
        ("topk 5 of [128, 1000]", lambda: torch.topk(a, 5).indices),
        ("topk 5 of [8192, 30522]", lambda: torch.topk(b, 5).indices),
        ("sort [1024, 1024] last dim", lambda: torch.sort(c).values),
        ("sort [1024, 1024] dim 0", lambda: torch.sort(c, 0).values),
        ("sort one row of 2^22", lambda: torch.sort(d).values),
        ("cumsum [64, 128, 768] dim 1", lambda: torch.cumsum(e, 1)),
        ("cumsum [64, 128, 768] last dim", lambda: torch.cumsum(e, -1)),
    ]


def main():
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for i, (name, fn) in enumerate(cases()):
        fn()
        times = []
        deadline = time.perf_counter() + 2.0
        while time.perf_counter() < deadline or len(times) < 5:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        print(f"{i}  {name:34s} {statistics.median(times) * 1e3:9.3f} ms")


if __name__ == "__main__":
    main()
