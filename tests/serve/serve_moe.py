#!/usr/bin/env python3
"""`meshtrain serve --expert AXIS` on a mixture-of-experts checkpoint (serve_http.py's server).

usage: serve_moe.py MPIEXEC MESHTRAIN WORKDIR NP [mesh flags...]

The checkpoint: 2 training steps of a model with 6 routed experts (top-2) and a shared one, on the
built-in corpus, written once beside WORKDIR. The server shards the routed experts over the mesh
flags' --expert axis; 16 concurrent greedy clients (every other one streaming, a pool small enough
to preempt) must get `meshtrain generate`'s texts on 1 rank, where every expert is local;
/metrics must show every request done and every block back; a dense checkpoint with --expert is
refused with one message. Exit 0 when every check passed, 1 otherwise.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_http as sh  # noqa: E402

MOE = ["--experts", "6", "--moe-top-k", "2", "--shared-experts", "1", "--expert-d-ff", "32"]


def main():
    args = sh.script_args(sys.argv[1:])
    args.ckpt = sh.trained(args, "serve_moe_ck.h5", sh.MODEL + MOE)
    want = dict(zip(sh.PROMPTS, sh.generate(args, sh.PROMPTS, 30, ["--temperature", "0"])))
    s = sh.Server(args, "moe", ["--max-seqs", "8", "--kv-block", "4", "--kv-blocks", "40",
                                "--max-batch-tokens", "24", "--prefill-chunk", "8"])
    try:
        log = open(s.log).read()
        sh.check("(MoE)" in log, "the server loaded the checkpoint's experts")
        wrong = sh.greedy_clients(s, 16, want)
        sh.wait_for(lambda: s.metrics()["meshtrain_kv_blocks_used"] == 0, 30)
        m = s.metrics()
        sh.check(not wrong, "16 concurrent greedy clients (8 streams), experts over %s: every "
                 "text equals generate on 1 rank (%d differ; %d preemptions)" %
                 (" ".join(args.mesh), len(wrong), m["meshtrain_preemptions_total"]))
        sh.check(m['meshtrain_requests_total{end="length"}'] == 16 and
                 m["meshtrain_kv_blocks_used"] == 0, "/metrics: 16 done, no block used")
    finally:
        s.stop()
    sh.checkpoint(args)  # a dense checkpoint: --expert refused with one message, status 2
    cmd = [args.mpiexec, "--oversubscribe", "-np", str(args.np), args.meshtrain, "serve",
           "--port", "0", "--ckpt", args.ckpt] + args.mesh
    r = subprocess.run(cmd, capture_output=True, env=sh.mpi_env(), timeout=120)
    err = r.stderr.decode()
    sh.check(r.returncode == 2 and err.count("has none") == 1,
             "--expert on a dense checkpoint: status %d, one message (%s)" %
             (r.returncode, err.strip()[:160]))
    print("serve_moe: %d failure(s)" % len(sh.FAILS))
    sys.exit(1 if sh.FAILS else 0)


if __name__ == "__main__":
    main()
