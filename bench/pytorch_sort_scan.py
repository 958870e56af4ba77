#!/usr/bin/env python3
"""PyTorch's side of BM_SortAndScan, BM_SelectAndContract, BM_CnnDecoderOps and BM_Indexing
(bench/bench_elementwise.cpp), the
same cases in the same order.

Prints the median time of each case in milliseconds, on the CPU with torch's default threads
(run it with the same OMP_NUM_THREADS as the benchmark). Needs torch (not CI).

Run: python3 bench/pytorch_sort_scan.py            (BM_SortAndScan)
     python3 bench/pytorch_sort_scan.py select     (BM_SelectAndContract)
     python3 bench/pytorch_sort_scan.py cnn        (BM_CnnDecoderOps)
     python3 bench/pytorch_sort_scan.py indexing   (BM_Indexing)
"""
import statistics
import sys
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


def select_cases():
    g = torch.Generator().manual_seed(0)
    small = torch.rand(64, 128, generator=g) < 0.15
    big = torch.rand(4096, 1024, generator=g) < 0.15
    values = torch.randn(4096, 1024, generator=g)
    q, k = torch.randn(64, 12, 128, 64, generator=g), torch.randn(64, 12, 128, 64, generator=g)
    floats = torch.randn(1 << 22, generator=g) * 100
    ints = torch.randint(-100000, 100000, (1 << 22,), generator=g)
    return [
        ("nonzero of [64, 128]", lambda: torch.nonzero(small)),
        ("nonzero of [4096, 1024]", lambda: torch.nonzero(big)),
        ("masked_select [4096, 1024]", lambda: torch.masked_select(values, big)),
        ("einsum bhqd,bhkd->bhqk", lambda: torch.einsum("bhqd,bhkd->bhqk", q, k)),
        ("matmul q k^T", lambda: torch.matmul(q, k.transpose(-1, -2))),
        ("remainder of 2^22 floats", lambda: floats % 3.7),
        ("floor_divide of 2^22 int64", lambda: torch.floor_divide(ints, 7)),
    ]


def cnn_cases():
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 64, 32, 32, generator=g).requires_grad_()
    w = (torch.randn(64, 32, 2, 2, generator=g) * 0.1).requires_grad_()
    gw, gb = torch.ones(64, requires_grad=True), torch.zeros(64, requires_grad=True)

    def trained(fn):
        def run():
            out = fn()
            out.sum().backward()
            x.grad = None
            return out
        return run

    def inference():
        with torch.no_grad():
            return F.interpolate(x, scale_factor=2.0, mode="bilinear")

    return [
        ("conv_transpose2d 64->32 k2 s2", trained(lambda: F.conv_transpose2d(x, w, stride=2))),
        ("group_norm 32 groups", trained(lambda: F.group_norm(x, 32, gw, gb))),
        ("nearest 2x", trained(lambda: F.interpolate(x, scale_factor=2.0))),
        ("bilinear 2x", trained(lambda: F.interpolate(x, scale_factor=2.0, mode="bilinear"))),
        ("bilinear 2x forward", inference),
    ]


def indexing_cases():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8192, 256, generator=g)
    rows, cols = torch.randint(0, 8192, (4096,), generator=g), torch.randint(0, 256, (128,), generator=g)
    mask, v = torch.rand(8192, 256, generator=g) < 0.15, torch.randn(4096, 256, generator=g)
    s, probes = torch.sort(torch.randn(1 << 16, generator=g)).values, torch.randn(1 << 20, generator=g)
    return [
        ("x[idx] 4096 rows", lambda: x[rows]),
        ("x[:, idx] 128 columns", lambda: x[:, cols]),
        ("x[mask] = 0", lambda: x.index_put_((mask,), torch.tensor(0.0))),
        ("x.index_put_(rows, accumulate)", lambda: x.index_put_((rows,), v, accumulate=True)),
        ("x[mask]", lambda: x[mask]),
        ("searchsorted 2^20 in 2^16", lambda: torch.searchsorted(s, probes)),
    ]


def main():
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    which = {"select": select_cases, "cnn": cnn_cases, "indexing": indexing_cases}.get(sys.argv[1] if sys.argv[1:] else "", cases)
    for i, (name, fn) in enumerate(which()):
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
