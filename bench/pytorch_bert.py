#!/usr/bin/env python3
"""PyTorch side of the CPU BERT benchmark (issue 4, Speed): BertForMaskedLM train and eval steps.

transformers' BertForMaskedLM (attn_implementation="sdpa"), float32, random weights and token ids,
no padding (an all-ones attention mask), 15% of positions labelled; a train step is forward, MLM
cross-entropy, backward and an optimizer step (AdamW, lr 1e-4, weight decay 0.01; --optimizer sgd
for SGD with momentum 0.9), an eval step a forward under no_grad.
--mlm full computes logits at every position (BertForMaskedLM's forward); --mlm sparse runs the
head only on the labelled positions (model.bert, gather, model.cls), as Kiln's masked_lm_loss does.
Prints one JSON line per mode, like build/bench/bench_bert.

  python3 bench/pytorch_bert.py --config base --modes train,eval --batch 8 --seq 128 --threads 2
  python3 bench/pytorch_bert.py --modes train --profile   # torch.profiler's top ops
"""
import argparse
import json
import platform
import statistics
import time

import torch
import transformers
from transformers import BertConfig, BertForMaskedLM

SIZES = {  # num_hidden_layers, hidden_size, num_attention_heads, intermediate_size (kiln::models::BertConfig presets)
    "tiny": (2, 128, 2, 512),
    "mini": (4, 256, 4, 1024),
    "small": (4, 512, 8, 2048),
    "base": (12, 768, 12, 3072),
}


def setup(config, mode, batch, seq, optimizer, mlm="full"):
    torch.manual_seed(0)
    layers, hidden, heads, inter = SIZES[config]
    cfg = BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     intermediate_size=inter, attn_implementation="sdpa")
    model = BertForMaskedLM(cfg)
    model.train(mode == "train")
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.int64)
    labels = torch.where(torch.rand(batch, seq) < 0.15, ids, torch.full_like(ids, -100))
    if optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    picked = (labels != -100).flatten().nonzero().squeeze(1)

    def loss_fn():
        if mlm == "full":
            return model(input_ids=ids, attention_mask=mask, labels=labels).loss
        hidden = model.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        logits = model.cls(hidden.flatten(0, 1).index_select(0, picked))
        return torch.nn.functional.cross_entropy(logits, labels.flatten()[picked])

    if mode == "train":
        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn()
            loss.backward()
            opt.step()
    else:
        def step():
            with torch.no_grad():
                model(input_ids=ids, attention_mask=mask)
    return step


def bench(a, mode):
    step = setup(a.config, mode, a.batch, a.seq, a.optimizer, a.mlm)
    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"framework": "pytorch", "torch": torch.__version__, "transformers": transformers.__version__,
            "model": "bert-" + a.config, "mode": mode, "optimizer": a.optimizer if mode == "train" else "none",
            "mlm": a.mlm if mode == "train" else "none",
            "batch": a.batch, "seq": a.seq, "threads": torch.get_num_threads(), "warmup": a.warmup,
            "steps": a.steps, "median_step_s": round(med, 4), "min_step_s": round(min(times), 4),
            "samples_per_s": round(a.batch / med, 2), "cpu": platform.processor() or platform.machine()}


def profile(a, mode):
    step = setup(a.config, mode, a.batch, a.seq, a.optimizer, a.mlm)
    step()  # warm-up outside the profile
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.top))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="base", choices=sorted(SIZES))
    p.add_argument("--modes", default="train,eval")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"])
    p.add_argument("--mlm", default="full", choices=["full", "sparse"])
    p.add_argument("--profile", action="store_true", help="print torch.profiler's top ops instead of timing")
    p.add_argument("--top", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    for mode in a.modes.split(","):
        if a.profile:
            profile(a, mode)
        else:
            print(json.dumps(bench(a, mode)), flush=True)


if __name__ == "__main__":
    main()
