#!/usr/bin/env python3
"""Forward + backward time of scaled-dot-product attention at the attention shapes of the SD1.5
UNet + v2 motion modules (16 frames at 256², bf16), per SDPA kernel family, on one GPU: which
kernel serves the short temporal sequences (16 frames) and which the spatial ones. PyTorch on the
GPU machine runs the same ATen kernels as adworker's LibTorch.

usage: python3 bench/attention-shapes.py [BATCH]   (default 8)"""
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
frames, heads = 16, 8
# (what, N, L query, L key, head dim); latents 32×32 → levels of 32², 16², 8² tokens per frame.
shapes = []
for side, ch in ((32, 320), (16, 640), (8, 1280)):
    d = ch // heads
    shapes.append((f"spatial self {side}²", batch * frames, side * side, side * side, d))
    shapes.append((f"cross {side}²", batch * frames, side * side, 77, d))
    shapes.append((f"temporal {side}²", batch * side * side, frames, frames, d))
shapes.append(("temporal 4² (mid/low)", batch * 16, frames, frames, 160))

backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def time_ms(fn, reps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


print("| attention | N·heads | Lq × Lk | d | " + " | ".join(f"{b} fwd+bwd ms" for b in backends) + " |")
print("|---|---|---|---|" + "---|" * len(backends))
for what, n, lq, lk, d in shapes:
    # As adworker lays them out: [N, L, heads·d] projections viewed as [N, heads, L, d].
    q = torch.randn(n, lq, heads * d, device="cuda", dtype=torch.bfloat16).view(n, lq, heads, d).transpose(1, 2)
    k = torch.randn(n, lk, heads * d, device="cuda", dtype=torch.bfloat16).view(n, lk, heads, d).transpose(1, 2)
    v = torch.randn_like(k)
    for t in (q, k, v):
        t.requires_grad_()
    g = torch.randn(n, heads, lq, d, device="cuda", dtype=torch.bfloat16)
    cells = []
    for name, backend in backends.items():
        def step():
            with sdpa_kernel(backend):
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            torch.autograd.grad(out, (q, k, v), g)
        try:
            cells.append(f"{time_ms(step):.3f}")
        except Exception as e:  # the kernel does not serve this shape
            cells.append("n/a")
        torch.cuda.empty_cache()
    print(f"| {what} | {n * heads} | {lq} × {lk} | {d} | " + " | ".join(cells) + " |")
