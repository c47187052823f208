"""A Hugging Face training step on openreg beside the CPU: time, and what still falls back.

Tiny random-init GPT-2 and BERT (transformers' own model classes), one step as a training script
writes it: bf16 autocast, a padded attention mask, the loss, backward, ``clip_grad_norm_`` and AdamW,
fused or foreach. For each: the step's median time on openreg and on CPU (one thread, interleaved
runs), and from a trace of one openreg step the operators that fell back, and the bytes copied
between host and device and within the device (autocast's casts, clones).

.venv/bin/python benchmarks/bench_hf_step.py
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import compare, fmt_time, print_table

import openreg_lab

VOCAB, SEQ = 128, 16


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config)


def _bert() -> nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    return BertForMaskedLM(config)


def _step(make: Callable[[], nn.Module], device: str, fused: bool) -> Callable[[], None]:
    torch.manual_seed(0)
    model = make().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused, foreach=not fused)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=g).to(device)
    mask = torch.ones(2, SEQ, dtype=torch.long)
    mask[1, SEQ - 4 :] = 0  # the second sequence is padded
    mask = mask.to(device)

    def run() -> None:
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()

    return run


def main() -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    rows, left = [], {}
    for name, make in (("gpt2", _gpt2), ("bert", _bert)):
        for fused in (True, False):
            label = f"{name}, AdamW {'fused' if fused else 'foreach'}"
            dev, cpu = _step(make, "openreg", fused), _step(make, "cpu", fused)
            dev()
            with openreg_lab.trace() as t:
                dev()
            fb = t.fallbacks()
            copies = t.copies()
            host = copies[copies["direction"].isin(["H2D", "D2H"])]  # D2D: casts and clones on the device
            t_dev, t_cpu = compare([dev, cpu], rounds=9)
            rows.append(
                [
                    label,
                    fmt_time(t_dev),
                    fmt_time(t_cpu),
                    f"{t_dev / t_cpu:.2f}x",
                    str(int(fb["calls"].sum()) if len(fb) else 0),
                    str(int(host["bytes"].sum())),
                    str(int(copies["bytes"].sum() - host["bytes"].sum())),
                ]
            )
            left[label] = ", ".join(f"{n} x{c}" for n, c in zip(fb["name"], fb["calls"], strict=True))
    print("HF training step (bf16 autocast, mask, clip_grad_norm_, AdamW), one thread, medians\n")
    header = ["model", "openreg", "cpu", "openreg/cpu", "fallback calls", "bytes host<->dev", "bytes on dev"]
    print_table(header, rows)
    print("\nwhat still falls back\n")
    print_table(["model", "ops"], [[k, v or "-"] for k, v in left.items()])


if __name__ == "__main__":
    main()
