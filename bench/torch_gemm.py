#!/usr/bin/python3
"""PyTorch's matmul (torch.mm, fp32 and bf16) on bench/gemm_bench.c's shapes, beside it
(bench/gemm_bench.sh runs the two): the forward (y = x·w), dX (dy·wᵀ) and dW (xᵀ·dy, added to an
fp32 gradient in fp32 as autocast's optimizer sees it; in bf16 the product alone) of configs (a)
and (b) (B·T = 2048 rows), and decode's rows (M = 1, 8, 32) against a weight of --decode-mb MB
in bf16 (K = 8192). One thread; the variants alternate within each round.

usage: torch_gemm.py [--rounds 5] [--decode-mb 256] [--threads 1] [--csv FILE]
CSV columns as gemm_bench's: part,shape,product,variant,min_ms,median_ms,gflops,gbs.
"""
import argparse
import statistics
import time

import torch


def products(M, K, N, dtype):
    """The three products of a training step on [M, K]·[K, N], as closures."""
    x, w, dy = (torch.randn(*s).to(dtype) for s in ((M, K), (K, N), (M, N)))
    dw = torch.zeros(K, N)
    fwd = lambda: torch.mm(x, w)
    dx = lambda: torch.mm(dy, w.t())
    if dtype == torch.float32:
        dwf = lambda: dw.addmm_(x.t(), dy)
    else:
        dwf = lambda: torch.mm(x.t(), dy)
    return {"fwd": fwd, "dx": dx, "dw": dwf}


def time_variants(fns, rounds):
    """Runs each closure once to warm up, then `rounds` times alternating; times in seconds."""
    for f in fns.values():
        f()
    t = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            t[k].append(time.perf_counter() - t0)
    return t


def report(rows, part, shape, product, times, flops, wbytes):
    for variant, ts in times.items():
        mn, med = min(ts), statistics.median(ts)
        b = wbytes * (2 if variant.startswith("torch fp32") else 1)
        gbs = b / med * 1e-9 if wbytes else 0.0
        print(f"{part:6} {shape:22} {product:4} {variant:16} {mn * 1e3:9.3f} {med * 1e3:9.3f} ms "
              f"{flops / med * 1e-9:8.1f} GFLOP/s" + (f" {gbs:7.1f} GB/s" if wbytes else ""))
        rows.append((part, shape, product, variant, mn * 1e3, med * 1e3, flops / med * 1e-9, gbs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--decode-mb", type=float, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--csv")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    rows = []
    print(f"torch_gemm: PyTorch {torch.__version__}, {a.threads} thread(s), {a.rounds} rounds")
    for cfg, D, F in (("(a)", 256, 1024), ("(b)", 512, 2048)):
        for K, N in ((D, D), (D, F), (F, D)):
            shape = f"{cfg} 2048x{K}x{N}"
            p32, p16 = products(2048, K, N, torch.float32), products(2048, K, N, torch.bfloat16)
            for prod in ("fwd", "dx", "dw"):
                t = time_variants({"torch fp32": p32[prod], "torch bf16": p16[prod]}, a.rounds)
                report(rows, "train", shape, prod, t, 2.0 * 2048 * K * N, 0)
    K = 8192
    N = int(a.decode_mb * 1e6 / 2 / K) // 16 * 16
    w32 = torch.randn(K, N)
    w16 = w32.to(torch.bfloat16)
    for M in (1, 8, 32):
        x32 = torch.randn(M, K)
        x16 = x32.to(torch.bfloat16)
        t = time_variants({"torch fp32": lambda: torch.mm(x32, w32),
                           "torch bf16": lambda: torch.mm(x16, w16)}, a.rounds)
        report(rows, "decode", f"M={M} {K}x{N}", "fwd", t, 2.0 * M * K * N, 2.0 * K * N)
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("part,shape,product,variant,min_ms,median_ms,gflops,gbs\n")
            for r in rows:
                f.write("%s,%s,%s,%s,%.6f,%.6f,%.3f,%.3f\n" % r)


if __name__ == "__main__":
    main()
