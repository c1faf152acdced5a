#!/usr/bin/python3
"""meshtrain's model in PyTorch: an independent implementation of the README's conventions, used
(1) as the speed baseline of the benchmark and (2) as a correctness check on identical parameters.

Conventions (README "The model"): LLaMA-style decoder, fp32, no biases, no dropout. RMSNorm
y = x / sqrt(mean(x^2) + 1e-5) * g; rotary "rotate-half" (element i pairs with i + H/2, angle
pos * 10000^(-2i/H)); causal attention with scale 1/sqrt(H); grouped-query heads (query head h
uses kv head h // (N/K)); SwiGLU MLP down(silu(x w_gate) * (x w_up)); final RMSNorm; untied
unembedding; mean next-token cross-entropy. Parameters are stacked over layers under the README's
names: embed[V,D] attn_norm[L,D] wq[L,D,N*H] wk[L,D,K*H] wv[L,D,K*H] wo[L,N*H,D] mlp_norm[L,D]
w_gate[L,D,F] w_up[L,D,F] w_down[L,F,D] final_norm[D] unembed[D,V].

Usage (Debian's python3-torch; run with /usr/bin/python3):
  torch_ref.py --bench a|b [--steps 10] [--autocast]
      tokens/s of forward + backward + AdamW on random tokens, one thread, for the README's configs
      (a) L=4 D=256 N=K=4 F=1024 T=128 B=16, (b) L=8 D=512 N=K=8 F=2048 T=256 B=8. Prints
      "torch | tok/s median X best Y | ms/step median M best m". --autocast: the forward under
      torch.autocast("cpu", torch.bfloat16) (bf16 matmuls; PyTorch's mixed precision).
  torch_ref.py --check INIT.h5 --data TEXT --batch B [--final FINAL.h5 --lr LR]
      loads parameters written by `meshtrain --save-init`, evaluates the loss of step 0 of
      meshtrain's --data-order sequential batch (row b = train tokens [b*T, b*T + T + 1)), and
      prints "loss X". With --final (a `--save-final` after one step of `--optimizer sgd
      --weight-decay 0 --clip 0 --warmup 0 --lr LR`), it recovers meshtrain's gradient as
      (init - final) / LR and prints, per parameter, the largest difference from PyTorch's
      gradient relative to the largest PyTorch gradient entry: "grad NAME rel E", and the
      difference's norm relative to PyTorch's gradient's: "relnorm R". --autocast: PyTorch's
      loss and gradients under bf16 autocast, and those of its fp32 model beside them ("loss32",
      "grad32 NAME ...": the same figures against the fp32 gradient).
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F_

CONFIGS = {
    "a": dict(L=4, D=256, N=4, K=4, F=1024, T=128, B=16),
    "b": dict(L=8, D=512, N=8, K=8, F=2048, T=256, B=8),
}
NAMES = ["embed", "attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down",
         "final_norm", "unembed"]


def rmsnorm(x, g):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g


def rope_tables(T, H):
    i = torch.arange(H // 2, dtype=torch.float64)
    inv = 10000.0 ** (-2.0 * i / H)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]  # [T, H/2]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope(x, cos, sin):
    """x[B, T, n, H]: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), halves of each head."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def attention_residual(m, l, x, cos, sin, mask):
    """x + layer l's causal attention sublayer (RMSNorm, q/k/v with RoPE, GQA, wo) of model m
    (its N, K, H and its attn_norm, wq, wk, wv, wo stacks), for x[B, T, D]."""
    B, T = x.shape[0], x.shape[1]
    N, K, H = m.N, m.K, m.H
    h = rmsnorm(x, m.attn_norm[l])
    q = rope((h @ m.wq[l]).view(B, T, N, H), cos, sin).transpose(1, 2)
    k = rope((h @ m.wk[l]).view(B, T, K, H), cos, sin).transpose(1, 2)
    v = (h @ m.wv[l]).view(B, T, K, H).transpose(1, 2)
    if N != K:
        k = k.repeat_interleave(N // K, dim=1)
        v = v.repeat_interleave(N // K, dim=1)
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(H))
    p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
    a = (p @ v).transpose(1, 2).reshape(B, T, N * H)
    return x + a @ m.wo[l]


def add_params(m, shapes, names, T, H):
    """Registers module m's parameters `names` (shapes[name] each, not initialised) and the
    buffers of T positions its attention reads: the RoPE tables (head dim H) and the causal mask."""
    for name in names:
        m.register_parameter(name, torch.nn.Parameter(torch.empty(shapes[name])))
    cos, sin = rope_tables(T, H)
    m.register_buffer("cos", cos)
    m.register_buffer("sin", sin)
    m.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))


def init_params(m, names, L, seed):
    """The README's initialisation of m's parameters `names`, in that order (not meshtrain's exact
    values: that needs its Philox RNG): norms 1, other weights N(0, 0.02²), the projections back
    into the residual stream (wo, w_down and the experts') scaled by 1/sqrt(2L)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in names:
            p = getattr(m, name)
            if name.endswith("norm"):
                p.fill_(1.0)
            else:
                out = name in ("wo", "w_down", "expert_down", "shared_down")
                std = 0.02 / (math.sqrt(2 * L) if out else 1.0)
                p.copy_(torch.randn(p.shape, generator=gen) * std)


class Model(torch.nn.Module):
    def __init__(self, L, D, N, K, H, F, V, T):
        super().__init__()
        self.L, self.D, self.N, self.K, self.H, self.F, self.V, self.T = L, D, N, K, H, F, V, T
        shapes = dict(embed=(V, D), attn_norm=(L, D), wq=(L, D, N * H), wk=(L, D, K * H),
                      wv=(L, D, K * H), wo=(L, N * H, D), mlp_norm=(L, D), w_gate=(L, D, F),
                      w_up=(L, D, F), w_down=(L, F, D), final_norm=(D,), unembed=(D, V))
        add_params(self, shapes, NAMES, T, H)

    def init_random(self, seed):
        init_params(self, NAMES, self.L, seed)

    def forward(self, tokens):
        """tokens[B, T+1] int64 -> mean cross-entropy of predicting tokens[:, 1:]."""
        inp, tgt = tokens[:, :-1], tokens[:, 1:]
        B, T = inp.shape
        return F_.cross_entropy(self.logits(inp).reshape(B * T, self.V), tgt.reshape(B * T))

    def logits(self, inp):
        """inp[B, T] int64 -> logits[B, T, V]."""
        T = inp.shape[1]
        cos, sin, mask = self.cos[:T], self.sin[:T], self.mask[:T, :T]
        x = self.embed[inp]
        for l in range(self.L):
            x = attention_residual(self, l, x, cos, sin, mask)
            h = rmsnorm(x, self.mlp_norm[l])
            x = x + (F_.silu(h @ self.w_gate[l]) * (h @ self.w_up[l])) @ self.w_down[l]
        return rmsnorm(x, self.final_norm) @ self.unembed


def forward(model, tokens, autocast):
    """The model's loss, under bf16 autocast (PyTorch's mixed precision on the CPU) or fp32."""
    if not autocast:
        return model(tokens)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return model(tokens).float()


def bench(name, steps, autocast=False, warmup=2, seed=1337):
    cfg = CONFIGS[name]
    L, D, N, K, F, T, B = (cfg[k] for k in "LDNKFTB")
    V, H = 256, D // N
    torch.manual_seed(seed)
    model = Model(L, D, N, K, H, F, V, T)
    model.init_random(seed)
    decay = [p for n, p in model.named_parameters() if not n.endswith("norm")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("norm")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    med, best = timed_steps("torch", model, lambda t: (forward(model, t, autocast),) * 2, opt, B, T,
                            V, steps, warmup)
    print(f"torch | tok/s median {B * T / med:.0f} best {B * T / best:.0f} | ms/step median "
          f"{1e3 * med:.1f} best {1e3 * best:.1f} | config {name} L={L} D={D} N={N} K={K} F={F} "
          f"T={T} B={B} | {'bf16 autocast' if autocast else 'fp32'} | torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread")


def timed_steps(label, model, losses, opt, B, T, V, steps, warmup):
    """forward + backward + clip + step on random tokens[B, T+1], warmup untimed then `steps`
    timed, a line each; losses(tokens) -> (the loss printed, the one differentiated). Returns the
    median and best step in seconds."""
    secs = []
    for step in range(warmup + steps):
        tokens = torch.randint(0, V, (B, T + 1))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        shown, loss = losses(tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if step >= warmup:
            secs.append(dt)
            print(f"{label} step {step - warmup + 1} | loss {shown.item():.4f} | {1e3 * dt:.1f} ms "
                  f"| {B * T / dt:.0f} tok/s", flush=True)
    return statistics.median(secs), min(secs)


def step0_tokens(path, T, batch):
    """meshtrain's --data-order sequential step 0 of a text file: /val is its last floor(n/10)
    tokens, /train the rest; row b starts at (b * T) mod (n_train - T - 1)."""
    with open(path, "rb") as fh:
        data = fh.read()
    n_train = len(data) - int(math.floor(len(data) * 0.1))
    rows = [list(data[(b * T) % (n_train - T - 1):][:T + 1]) for b in range(batch)]
    return torch.tensor(rows, dtype=torch.int64)


def load_params(path):
    import h5py
    with h5py.File(path, "r") as f:
        g = f["params"]  # a checkpoint (docs/checkpoints.md): the model's shape on the root
        a = {k: int(f.attrs[k]) for k in ("layers", "d_model", "heads", "kv_heads", "head_dim",
                                          "d_ff", "vocab", "seq_len")}
        arrays = {n: torch.from_numpy(g[n][...]).float() for n in NAMES}
    return a, arrays


def loss_and_grads(a, init, tokens, autocast):
    """PyTorch's loss and gradients on the parameters init (fp32, or under bf16 autocast)."""
    L, D, N, K, H = a["layers"], a["d_model"], a["heads"], a["kv_heads"], a["head_dim"]
    F, V, T = a["d_ff"], a["vocab"], a["seq_len"]
    model = Model(L, D, N, K, H, F, V, T)
    with torch.no_grad():
        for n in NAMES:
            getattr(model, n).copy_(init[n])
    loss = forward(model, tokens, autocast)
    loss.backward()
    return loss.item(), {n: getattr(model, n).grad for n in NAMES}


def max_logit(a, init, tokens):
    """The largest |logit| of the fp32 model on tokens (the scale of the loss's rounding)."""
    L, D, N, K, H = a["layers"], a["d_model"], a["heads"], a["kv_heads"], a["head_dim"]
    model = Model(L, D, N, K, H, a["d_ff"], a["vocab"], a["seq_len"])
    with torch.no_grad():
        for n in NAMES:
            getattr(model, n).copy_(init[n])
        return model.logits(tokens[:, :-1]).abs().max().item()


def compare_grads(label, init, final, lr, grads, names=NAMES):
    """meshtrain's gradient (init - final) / lr against grads, per parameter of names."""
    worst = worst_norm = 0.0
    for n in names:
        g_mt, g_pt = (init[n] - final[n]) / lr, grads[n].float()
        scale = g_pt.abs().max().item() + 1e-30
        rel = (g_mt - g_pt).abs().max().item() / scale
        relnorm = ((g_mt - g_pt).norm() / (g_pt.norm() + 1e-30)).item()
        worst, worst_norm = max(worst, rel), max(worst_norm, relnorm)
        print(f"{label} {n} rel {rel:.3e} relnorm {relnorm:.3e} (max |g| {scale:.3e})")
    print(f"{label} worst rel {worst:.3e}")
    print(f"{label} worst relnorm {worst_norm:.3e}")


def check(args):
    a, init = load_params(args.check)
    tokens = step0_tokens(args.data, a["seq_len"], args.batch)
    loss, grads = loss_and_grads(a, init, tokens, args.autocast)
    print(f"loss {loss:.6f}")
    if args.autocast:
        loss32, grads32 = loss_and_grads(a, init, tokens, False)
        print(f"loss32 {loss32:.6f}")
        print(f"logits max {max_logit(a, init, tokens):.6f}")
    if args.final:
        _, final = load_params(args.final)
        compare_grads("grad", init, final, args.lr, grads)
        if args.autocast:
            compare_grads("grad32", init, final, args.lr, grads32)


def add_check_flags(ap):
    """The flags of --check, the same in every reference: the parameters meshtrain saved before
    (INIT.h5) and after (FINAL.h5) one SGD step of learning rate --lr on the text --data."""
    ap.add_argument("--check", metavar="INIT.h5")
    ap.add_argument("--final", metavar="FINAL.h5")
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--data", metavar="TEXT")


def run(ap, bench_fn, check_fn, usage):
    """Parses ap's flags (--threads among them), then runs bench_fn(args) for --bench or
    check_fn(args) for --check; neither: usage as the error. Returns the exit status."""
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.bench:
        bench_fn(args)
    elif args.check:
        if not args.data:
            ap.error("--check needs --data TEXT (the text file meshtrain trained on)")
        check_fn(args)
    else:
        ap.error(usage)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", choices=sorted(CONFIGS))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    add_check_flags(ap)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--autocast", action="store_true",
                    help="bf16 autocast (PyTorch's mixed precision) instead of fp32")
    return run(ap, lambda a: bench(a.bench, a.steps, a.autocast), check,
               "give --bench a|b or --check INIT.h5")


if __name__ == "__main__":
    sys.exit(main())
