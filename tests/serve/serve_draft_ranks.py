#!/usr/bin/env python3
"""`meshtrain serve --draft CKPT --draft-ranks N`: the drafter on ranks of its own (serve_http.py's
server and helpers).

usage: serve_draft_ranks.py MPIEXEC MESHTRAIN WORKDIR NP [mesh flags with --draft-ranks N...]

The last N of the NP ranks run the 1-layer drafter (its heads over them), the others the target
on the mesh flags; each step the drafter's first rank sends the drafts to every target rank.
Checks:
  - 16 concurrent greedy clients (every other one streaming, a pool small enough to preempt) get
    plain greedy `meshtrain generate`'s texts;
  - each prompt alone, greedy, sent after the concurrent clients (their prompts' blocks in the
    prefix cache): the same text, and the same drafted and accepted counts (usage.speculative),
    as on the same-rank speculative server (the drafter sharded as the target on the target's
    NP − N ranks) with a fresh cache, and as `generate --draft` prints for the prompt: the rounds
    do not depend on how much of the prompt was cached or how it was chunked;
  - a sampled request completes; /metrics counts the drafts, alpha in (0, 1), every block back;
  - bad input ends with status 2 and one message: --draft-ranks without --draft, as many draft
    ranks as ranks, and a target of several replicas.
Exit 0 when every check passed, 1 otherwise.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_http as sh  # noqa: E402

POOL = ["--draft-tokens", "3", "--max-seqs", "8", "--kv-block", "4", "--kv-blocks", "40",
        "--max-batch-tokens", "24", "--prefill-chunk", "8"]


def alone(s):
    """Each prompt alone, greedy, 30 tokens: (text, drafted, accepted). Alone means the engine
    holds no other sequence when it arrives: a response is sent before its sequence is retired,
    and a step that still carries the last one's retirement shares the token budget, which can
    change how many tokens the next one drafts in its first rounds (not its text)."""
    out = []
    for p in sh.PROMPTS:
        sh.wait_for(lambda: s.metrics()["meshtrain_kv_blocks_used"] == 0, 30)
        st, _, data = s.request("POST", "/v1/completions",
                                {"prompt": p, "max_tokens": 30, "temperature": 0})
        j = json.loads(data)
        u = j.get("usage", {}).get("speculative", {})
        out.append((j["choices"][0]["text"] if st == 200 else "error %d" % st,
                    u.get("drafted"), u.get("accepted")))
    return out


def generate_counts(args, draft):
    """`meshtrain generate --draft` on the prompts at once, greedy, 30 tokens: each sequence's
    (drafted, accepted) from its `speculative | sequence` line."""
    cmd = [args.mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "1", args.meshtrain,
           "generate", "--tokens", "30", "--ckpt", args.ckpt, "--draft", draft,
           "--draft-tokens", POOL[POOL.index("--draft-tokens") + 1], "--temperature", "0"]
    for p in sh.PROMPTS:
        cmd += ["--prompt", p]
    err = subprocess.run(cmd, capture_output=True, env=sh.mpi_env(), timeout=300,
                         check=True).stderr.decode()
    got = re.findall(r"speculative \| sequence (\d+) \| drafted (\d+), kept (\d+)", err)
    return [(int(d), int(a)) for _, d, a in sorted(got, key=lambda g: int(g[0]))]


def refused(args, np_, flags, what):
    cmd = [args.mpiexec, "--oversubscribe", "-np", str(np_), args.meshtrain, "serve", "--port",
           "0", "--ckpt", args.ckpt] + flags
    r = subprocess.run(cmd, capture_output=True, env=sh.mpi_env(), timeout=120)
    err = r.stderr.decode()
    lines = [l for l in err.splitlines() if "error:" in l]
    sh.check(r.returncode == 2 and len(lines) == 1 and "--draft" in lines[0],
             "%s: status %d, one message (%s)" % (what, r.returncode, lines[:1]))


def main():
    args = sh.script_args(sys.argv[1:])
    sh.checkpoint(args)
    draft = sh.drafter(args)
    k = args.mesh.index("--draft-ranks")
    nd = int(args.mesh[k + 1])
    want = dict(zip(sh.PROMPTS, sh.generate(args, sh.PROMPTS, 30, ["--temperature", "0"])))
    s = sh.Server(args, "draft_ranks", ["--draft", draft] + POOL)
    try:
        wrong = sh.greedy_clients(s, 16, want)
        remote = alone(s)  # after the clients: their prompts' blocks in the prefix cache
        st, text, fin, _ = s.complete({"prompt": sh.PROMPTS[1], "max_tokens": 24,
                                       "temperature": 0.8, "top_k": 20, "seed": 5})
        sh.check(st == 200 and fin == "length", "a sampled request (T 0.8, top-k 20) completes")
        sh.wait_for(lambda: s.metrics()["meshtrain_kv_blocks_used"] == 0, 30)
        m = s.metrics()
        d, a = m["meshtrain_spec_draft_tokens_total"], m["meshtrain_spec_accepted_tokens_total"]
        sh.check(not wrong, "16 concurrent greedy clients, the drafter on %d rank(s) of its own: "
                 "every text equals plain generate (%d differ; %d preemptions)" %
                 (nd, len(wrong), m["meshtrain_preemptions_total"]))
        sh.check(d > 0 and 0 < a < d and 0 < m["meshtrain_spec_alpha"] < 1 and
                 m["meshtrain_kv_blocks_used"] == 0,
                 "/metrics: %d drafted, %d accepted, alpha %.3f, no block used" %
                 (d, a, m["meshtrain_spec_alpha"]))
    finally:
        s.stop()
    same = type("Args", (), {})()
    same.__dict__.update(args.__dict__)
    same.np, same.mesh = args.np - nd, args.mesh[:k] + args.mesh[k + 2:]
    s = sh.Server(same, "draft_same_ranks", ["--draft", draft] + POOL)
    try:
        local = alone(s)  # a fresh prefix cache
    finally:
        s.stop()
    gen = generate_counts(args, draft)
    sh.check(remote == local and all(r[0] == want[p] for r, p in zip(remote, sh.PROMPTS)) and
             [r[1:] for r in remote] == gen,
             "each prompt alone: texts, drafted and accepted equal the same-rank drafter's on %d "
             "ranks (a fresh cache), plain generate and generate --draft (remote %s, same-rank %s, "
             "generate --draft %s)" %
             (same.np, [r[1:] for r in remote], [r[1:] for r in local], gen))
    refused(args, 2, ["--draft-ranks", "1"], "--draft-ranks without --draft")
    refused(args, 2, ["--draft", draft, "--draft-ranks", "2"], "--draft-ranks 2 on 2 ranks")
    refused(args, 3, ["--mesh", "x=2", "--dp", "x", "--draft", draft, "--draft-ranks", "1"],
            "--draft-ranks with a target of 2 replicas")
    print("serve_draft_ranks: %d failure(s)" % len(sh.FAILS))
    sys.exit(1 if sh.FAILS else 0)


if __name__ == "__main__":
    main()
