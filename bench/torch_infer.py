#!/usr/bin/python3
"""meshtrain's model in PyTorch generating with a KV cache: the speed baseline of
`meshtrain generate --bench` (bench/infer_bench.sh runs the two side by side).

The model is bench/torch_ref.py's (the same conventions as meshtrain: RMSNorm, rotary
"rotate-half", grouped-query heads, SwiGLU, fp32). Generation: prefill of B prompts of P random
tokens in one forward pass that fills the cache K, V[L, B, S, K, H] (S = P + steps), then `steps`
decode steps of one token per sequence, each attending to the cache (grouped heads as a view, no
copy of the cache), greedy. No autograd (torch.inference_mode), one thread by default.

usage: torch_infer.py --batch B [--layers 8 --d-model 512 --heads 8 --kv-heads 8 --d-ff 1408
                      --vocab 256 --prompt 64 --steps 32 --threads 1 --rounds 1 --dtype fp32]
--dtype bf16: the weights and the cache in bfloat16 (every product and the attention in bf16, as
PyTorch runs a bf16 model; on a CPU without AVX512-BF16 its kernels widen each value).
prints, per round: "torch infer | B b | prefill ms X | decode ms/step median M min m | ..."

       torch_infer.py --check CKPT.h5 --prompts FILE --texts OUT --tokens N
checks `meshtrain generate --ckpt CKPT.h5 --prompts FILE --tokens N --temperature 0` (its stdout
in OUT: each prompt, its N new bytes, a newline) with this cache path on the same parameters:
each prompt alone, teacher-forced with meshtrain's tokens, every token must be PyTorch's argmax
or within TOL = 1e-4·(1 + max |logit|) of it (a near tie rounded the other way). Prints
"check | N tokens, A exact argmax, worst gap G (tolerance T)" and exits 1 on failure.
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F_

from torch_ref import NAMES, Model, load_params, rmsnorm


def rope_at(x, cos, sin):
    """x[B, T, n, H] with cos/sin[T, H/2] of each row's position."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def forward(m, tok, p0, kc, vc):
    """tok[B, T] at positions [p0, p0 + T): writes their keys/values into kc, vc[L, B, S, K, H]
    and returns the logits of the last position, [B, V]."""
    B, T = tok.shape
    N, K, H = m.N, m.K, m.H
    G = N // K
    cos, sin = m.cos[p0:p0 + T], m.sin[p0:p0 + T]
    x = m.embed[tok]
    S = p0 + T
    for l in range(m.L):
        h = rmsnorm(x, m.attn_norm[l])
        q = rope_at((h @ m.wq[l]).view(B, T, N, H), cos, sin)
        kc[l, :, p0:S] = rope_at((h @ m.wk[l]).view(B, T, K, H), cos, sin)
        vc[l, :, p0:S] = (h @ m.wv[l]).view(B, T, K, H)
        k = kc[l, :, :S].permute(0, 2, 3, 1)  # [B, K, H, S]
        v = vc[l, :, :S].transpose(1, 2)  # [B, K, S, H]
        qg = q.view(B, T, K, G, H).permute(0, 2, 1, 3, 4).reshape(B, K, T * G, H)
        s = (qg @ k) * (1.0 / math.sqrt(H))  # [B, K, T·G, S]
        if T > 1:  # causal: query row t (at p0 + t) sees keys [0, p0 + t]
            rows = torch.arange(T).repeat_interleave(G)[:, None] + p0
            s = s.masked_fill(torch.arange(S)[None, :] > rows, float("-inf"))
        a = torch.softmax(s, dim=-1) @ v  # [B, K, T·G, H]
        a = a.view(B, K, T, G, H).permute(0, 2, 1, 3, 4).reshape(B, T, N * H)
        x = x + a @ m.wo[l]
        h = rmsnorm(x, m.mlp_norm[l])
        x = x + (F_.silu(h @ m.w_gate[l]) * (h @ m.w_up[l])) @ m.w_down[l]
    return rmsnorm(x[:, -1], m.final_norm) @ m.unembed


def run(args, model):
    B, P, steps = args.batch, args.prompt, args.steps
    S = P + steps + 1
    kc = torch.zeros(model.L, B, S, model.K, model.H, dtype=model.embed.dtype)
    vc = torch.zeros_like(kc)
    prompt = torch.randint(0, model.V, (B, P))
    t0 = time.perf_counter()
    tok = forward(model, prompt, 0, kc, vc).argmax(-1)
    prefill = time.perf_counter() - t0
    secs = []
    for i in range(steps):
        t0 = time.perf_counter()
        tok = forward(model, tok[:, None], P + i, kc, vc).argmax(-1)
        secs.append(time.perf_counter() - t0)
    return prefill, statistics.median(secs), min(secs)


def check(args):
    a, params = load_params(args.check)
    model = Model(a["layers"], a["d_model"], a["heads"], a["kv_heads"], a["head_dim"], a["d_ff"],
                  a["vocab"], a["seq_len"] + args.tokens + 1)
    for n in NAMES:
        getattr(model, n).data.copy_(params[n])
    prompts = [ln.rstrip(b"\r") for ln in open(args.prompts, "rb").read().split(b"\n") if ln]
    out = open(args.texts, "rb").read()
    pos, n_tok, exact, worst, bad = 0, 0, 0, 0.0, 0
    for p in prompts:
        n = args.tokens
        if out[pos:pos + len(p)] != p or out[pos + len(p) + n:pos + len(p) + n + 1] != b"\n":
            print(f"FAIL: meshtrain's output does not hold prompt {p!r} + {n} bytes at {pos}")
            return 1
        gen = list(out[pos + len(p):pos + len(p) + n])
        pos += len(p) + n + 1
        S = len(p) + n + 1
        kc = torch.zeros(model.L, 1, S, model.K, model.H)
        vc = torch.zeros_like(kc)
        logits = forward(model, torch.tensor([list(p)]), 0, kc, vc)[0]
        for i, t in enumerate(gen):
            top = logits.max().item()
            gap = top - logits[t].item()
            tol = 1e-4 * (1.0 + logits.abs().max().item())
            n_tok += 1
            exact += gap == 0.0
            worst = max(worst, gap)
            if gap > tol:
                bad += 1
                print(f"FAIL prompt {p!r} token {i}: meshtrain {t}, PyTorch {logits.argmax().item()}"
                      f", gap {gap:.3g} > {tol:.3g}")
            if i + 1 < len(gen):
                logits = forward(model, torch.tensor([[t]]), len(p) + i, kc, vc)[0]
    print(f"check | {n_tok} tokens, {exact} exact argmax, worst gap {worst:.3g} (tolerance "
          f"1e-4·(1 + max |logit|)) | {bad} failures")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in ("check", "prompts", "texts"):
        ap.add_argument("--" + name)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    for name, default in (("layers", 8), ("d-model", 512), ("heads", 8), ("kv-heads", 8),
                          ("d-ff", 1408), ("vocab", 256), ("prompt", 64), ("steps", 32),
                          ("batch", 1), ("threads", 1), ("rounds", 1), ("seed", 1337)):
        ap.add_argument("--" + name, type=int, default=default)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.check:
        with torch.inference_mode():
            return check(args)
    torch.manual_seed(args.seed)
    L, D, N, K, F, V = args.layers, args.d_model, args.heads, args.kv_heads, args.d_ff, args.vocab
    H = D // N
    model = Model(L, D, N, K, H, F, V, args.prompt + args.steps + 1)
    model.init_random(args.seed)
    if args.dtype == "bf16":
        model = model.to(torch.bfloat16)
    with torch.inference_mode():
        run(args, model)  # warm-up: allocator, thread pool
        for r in range(args.rounds):
            prefill, med, best = run(args, model)
            print(f"torch infer | B {args.batch} | prefill ms {1e3 * prefill:.3f} | decode "
                  f"ms/step median {1e3 * med:.3f} min {1e3 * best:.3f} | tok/s "
                  f"{args.batch / med:.0f} | L={L} D={D} N={N} K={K} F={F} V={V} P={args.prompt} "
                  f"steps={args.steps} | {args.dtype} | torch {torch.__version__}, "
                  f"{torch.get_num_threads()} thread", flush=True)


if __name__ == "__main__":
    sys.exit(main())
