#!/usr/bin/python3
"""meshtrain's mixture-of-experts model in PyTorch: an independent implementation of the
README's MoE conventions on top of bench/torch_ref.py's decoder, used (1) as the speed baseline of
bench/moe_bench.sh and (2) as a correctness check on identical parameters.

Conventions (README "Mixture of experts"): block l's MLP is MoE when (l + 1) % every == 0. Its
input h = rmsnorm(x)·mlp_norm goes through an fp32 router h·router[lm] ([D, E]); the k experts of
largest logit, largest first, ties to the lower index (a stable descending sort), are weighted by
the softmax over those k logits (renormalised, as Mixtral). With a capacity factor c, an expert
takes at most ceil(c·k·T/E) slots of one sequence, first come first served in position order: slot
(t, j) to expert e is kept iff fewer than that many earlier tokens of the sequence chose e. A
dropped slot adds nothing. Each expert and each of the S shared experts (weight 1, every token) is
a SwiGLU MLP of width F_e: down(silu(h·gate)·(h·up)). The objective adds, for every MoE block,
aux_coef·mean over sequences of E·Σ_e f_e·P_e (f_e: the share of the sequence's T·k slots chosen
for e, a count without gradient; P_e: e's mean router probability over the sequence) and
z_coef·mean over tokens of logsumexp(logits)². Parameters: router[Lm,D,E] expert_gate[Lm,E,D,F_e]
expert_up[Lm,E,D,F_e] expert_down[Lm,E,F_e,D] shared_gate/up[Lm,S,D,F_e] shared_down[Lm,S,F_e,D],
the dense blocks' w_gate, w_up, w_down stacked over the L - Lm dense blocks.

Usage (Debian's python3-torch; run with /usr/bin/python3):
  torch_moe.py --bench --layers L --d-model D --heads N --d-ff F --seq-len T --batch B
               --experts E --moe-top-k k [--shared-experts S --expert-d-ff F_e --moe-every n]
               [--steps 10]
      tokens/s of forward + backward + AdamW on random tokens, one thread. Prints
      "torch-moe | tok/s median X best Y | ms/step median M best m".
  torch_moe.py --check INIT.h5 --data TEXT --batch B [--final FINAL.h5 --lr LR]
      as torch_ref.py --check, for a checkpoint with experts: prints "loss X" (the cross-entropy
      of step 0's batch), "objective X" (with the balance and z-losses), and with --final the
      largest gradient difference per parameter relative to the largest PyTorch entry.
"""
import argparse
import math
import sys

import torch
import torch.nn.functional as F_

sys.path.insert(0, __import__("os").path.dirname(__file__))
from torch_ref import (add_check_flags, add_params, attention_residual,  # noqa: E402
                       compare_grads, init_params, rmsnorm, run, step0_tokens, timed_steps)

DENSE = ["embed", "attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down",
         "final_norm", "unembed"]
MOE = ["router", "expert_gate", "expert_up", "expert_down", "shared_gate", "shared_up",
       "shared_down"]


def swiglu(h, gate, up, down):
    return (F_.silu(h @ gate) * (h @ up)) @ down


class MoEModel(torch.nn.Module):
    def __init__(self, L, D, N, K, H, F, V, T, E, k, S=0, Fe=None, every=1, capacity=0.0,
                 aux_coef=0.01, z_coef=0.0):
        super().__init__()
        Fe = Fe or F
        self.L, self.D, self.N, self.K, self.H, self.F, self.V, self.T = L, D, N, K, H, F, V, T
        self.E, self.k, self.S, self.Fe, self.every = E, k, S, Fe, every
        self.capacity, self.aux_coef, self.z_coef = capacity, aux_coef, z_coef
        Lm = L // every
        Ld = L - Lm
        self.Lm = Lm
        shapes = dict(embed=(V, D), attn_norm=(L, D), wq=(L, D, N * H), wk=(L, D, K * H),
                      wv=(L, D, K * H), wo=(L, N * H, D), mlp_norm=(L, D), w_gate=(Ld, D, F),
                      w_up=(Ld, D, F), w_down=(Ld, F, D), final_norm=(D,), unembed=(D, V),
                      router=(Lm, D, E), expert_gate=(Lm, E, D, Fe), expert_up=(Lm, E, D, Fe),
                      expert_down=(Lm, E, Fe, D), shared_gate=(Lm, S, D, Fe),
                      shared_up=(Lm, S, D, Fe), shared_down=(Lm, S, Fe, D))
        self.names = [n for n in DENSE + MOE if math.prod(shapes[n]) > 0]
        add_params(self, shapes, self.names, T, H)

    def init_random(self, seed):
        init_params(self, self.names, self.L, seed)

    def moe(self, h, lm):
        """h[B, T, D] -> (y[B, T, D], aux, z) of MoE block lm."""
        B, T, D = h.shape
        E, k = self.E, self.k
        logits = h @ self.router[lm]
        prob = torch.softmax(logits, dim=-1)
        lse = torch.logsumexp(logits, dim=-1)
        idx = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]
        w = torch.softmax(logits.gather(-1, idx), dim=-1)
        chosen = F_.one_hot(idx, E).sum(2)  # [B, T, E]: 1 where the token chose e
        keep = torch.ones_like(idx, dtype=torch.bool)
        if self.capacity > 0:
            cap = math.ceil(self.capacity * k * self.T / E)
            before = torch.cumsum(chosen, dim=1) - chosen  # earlier tokens' choices of e
            keep = before.gather(-1, idx) < cap
        y = torch.zeros_like(h)
        for s in range(self.S):
            y = y + swiglu(h, self.shared_gate[lm, s], self.shared_up[lm, s],
                           self.shared_down[lm, s])
        hf, yf = h.reshape(B * T, D), y.reshape(B * T, D)
        idxf, wf, keepf = idx.reshape(B * T, k), w.reshape(B * T, k), keep.reshape(B * T, k)
        for e in range(E):
            rows, slot = torch.nonzero((idxf == e) & keepf, as_tuple=True)
            if rows.numel() == 0:
                continue
            out = swiglu(hf[rows], self.expert_gate[lm, e], self.expert_up[lm, e],
                         self.expert_down[lm, e])
            yf = yf.index_add(0, rows, out * wf[rows, slot][:, None])
        f = chosen.sum(1).float() / (T * k)  # [B, E], a count: no gradient
        aux = (E * (f * prob.mean(1)).sum(-1)).mean()
        z = (lse * lse).mean()
        return yf.reshape(B, T, D), aux, z

    def forward(self, tokens):
        """tokens[B, T+1] -> (mean cross-entropy, objective with the MoE losses)."""
        inp, tgt = tokens[:, :-1], tokens[:, 1:]
        B, T = inp.shape
        cos, sin, mask = self.cos[:T], self.sin[:T], self.mask[:T, :T]
        x = self.embed[inp]
        extra = 0.0
        for l in range(self.L):
            x = attention_residual(self, l, x, cos, sin, mask)
            h = rmsnorm(x, self.mlp_norm[l])
            if (l + 1) % self.every == 0:
                y, aux, z = self.moe(h, (l + 1) // self.every - 1)
                extra = extra + self.aux_coef * aux + self.z_coef * z
                x = x + y
            else:
                ld = l - (l + 1) // self.every
                x = x + swiglu(h, self.w_gate[ld], self.w_up[ld], self.w_down[ld])
        logits = rmsnorm(x, self.final_norm) @ self.unembed
        ce = F_.cross_entropy(logits.reshape(B * T, self.V), tgt.reshape(B * T))
        return ce, ce + extra


def bench(a):
    torch.manual_seed(1337)
    H = a.d_model // a.heads
    m = MoEModel(a.layers, a.d_model, a.heads, a.heads, H, a.d_ff, 256, a.seq_len, a.experts,
                 a.moe_top_k, a.shared_experts, a.expert_d_ff, a.moe_every)
    m.init_random(1337)
    decay = [getattr(m, n) for n in m.names if not n.endswith("norm")]
    no_decay = [getattr(m, n) for n in m.names if n.endswith("norm")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    B, T = a.batch, a.seq_len
    med, best = timed_steps("torch-moe", m, m, opt, B, T, 256, a.steps, 2)
    print(f"torch-moe | tok/s median {B * T / med:.0f} best {B * T / best:.0f} | ms/step median "
          f"{1e3 * med:.1f} best {1e3 * best:.1f} | torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread")


def load(path):
    import h5py
    with h5py.File(path, "r") as f:
        at = {k: f.attrs[k] for k in f.attrs}
        arrays = {n: torch.from_numpy(f["params"][n][...]).float() for n in f["params"]}
    return at, arrays


def check(a):
    at, init = load(a.check)
    g = lambda k: int(at[k])  # noqa: E731
    m = MoEModel(g("layers"), g("d_model"), g("heads"), g("kv_heads"), g("head_dim"), g("d_ff"),
                 g("vocab"), g("seq_len"), g("experts"), g("moe_top_k"), g("shared_experts"),
                 g("expert_d_ff"), g("moe_every"), float(at["capacity_factor"]),
                 float(at["aux_loss_coef"]), float(at["router_z_loss_coef"]))
    with torch.no_grad():
        for n in m.names:
            getattr(m, n).copy_(init[n])
    ce, obj = m(step0_tokens(a.data, m.T, a.batch))
    print(f"loss {ce.item():.6f}")
    print(f"objective {obj.item():.6f}")
    if a.final:
        obj.backward()
        _, final = load(a.final)
        compare_grads("grad", init, final, a.lr, {n: getattr(m, n).grad for n in m.names},
                      m.names)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    for flag, default in (("layers", 4), ("d-model", 256), ("heads", 4), ("d-ff", 1024),
                          ("seq-len", 128), ("batch", 16), ("experts", 8), ("moe-top-k", 2),
                          ("shared-experts", 0), ("expert-d-ff", 0), ("moe-every", 1)):
        ap.add_argument("--" + flag, type=int, default=default)
    add_check_flags(ap)
    return run(ap, bench, check, "give --bench or --check INIT.h5")


if __name__ == "__main__":
    sys.exit(main())
