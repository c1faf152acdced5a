#!/usr/bin/env python3
"""The client side of the `meshtrain serve` tests: a server under mpirun stopped on every exit
path, SSE parsing, the test model's checkpoint, `meshtrain generate` as the reference, and the
check() tally (FAILS). serve_http.py, serve_logprobs.py, serve_moe.py and serve_draft_ranks.py
use it through serve_http."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

MODEL = ["--layers", "2", "--d-model", "32", "--heads", "4", "--kv-heads", "2", "--seq-len", "64"]
PROMPTS = ["ROMEO:", "To be or not", "First Citizen:\nBefore we", "O", "KING RICHARD III:",
           "Now is the winter", "ab", "thou art"]
FAILS = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILS.append(what)
    return ok


class Server:
    """A `meshtrain serve` under mpirun in its own process group; stopped on every exit path."""

    def __init__(self, args, tag, extra, env=None):
        self.log = os.path.join(args.work, tag + ".log")
        e = mpi_env()
        e.update(env or {})
        # mpirun --timeout: even if this script is killed before its finally, the job ends
        cmd = [args.mpiexec, "--timeout", "600", "--oversubscribe", "--bind-to", "none", "-np",
               str(args.np), args.meshtrain, "serve", "--port", "0", "--ckpt",
               args.ckpt] + args.mesh + extra
        self.logf = open(self.log, "w")
        self.p = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=e,
                                  start_new_session=True)
        self.port = None
        deadline = time.time() + 180
        while time.time() < deadline and self.p.poll() is None:
            m = re.search(r"listening on http://[^:]*:(\d+)/", open(self.log).read())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.1)
        if self.port is None:
            self.stop()
            raise RuntimeError("the server did not start:\n" + open(self.log).read())

    def stop(self, timeout=30):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
                self.p.wait(timeout)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.p.wait()
        self.logf.close()
        return self.p.returncode

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, raw=None, timeout=120):
        c = self.conn(timeout)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out = (r.status, dict(r.getheaders()), r.read())
        c.close()
        return out

    def complete(self, body, timeout=120):
        """(status, text or error message, finish_reason, headers); a stream is gathered."""
        if not body.get("stream"):
            st, hd, data = self.request("POST", "/v1/completions", body, timeout=timeout)
            j = json.loads(data)
            if st != 200:
                return st, j["error"]["message"], None, hd
            return st, j["choices"][0]["text"], j["choices"][0]["finish_reason"], hd
        c = self.conn(timeout)
        c.request("POST", "/v1/completions", body=json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            j = json.loads(r.read())
            return r.status, j["error"]["message"], None, dict(r.getheaders())
        text, finish, err, done = "", None, None, False
        for ev in sse_events(r):
            if ev == "[DONE]":
                done = True
                continue
            j = json.loads(ev)
            if "error" in j:
                err = j["error"]["message"]
                continue
            text += j["choices"][0]["text"]
            finish = j["choices"][0]["finish_reason"] or finish
        c.close()
        if err is not None or not done:
            return 503, err or "stream ended without [DONE]", None, {}
        return 200, text, finish, {}

    def metrics(self):
        st, _, data = self.request("GET", "/metrics")
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out


def sse_events(resp):
    buf = b""
    while True:
        chunk = resp.read1(4096) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            return
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if ev.startswith(b"data: "):
                yield ev[6:].decode()


def mpi_env():
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                OPENBLAS_NUM_THREADS="1")


def trained(args, name, model):
    """A model (flags) after 2 training steps on the built-in corpus from seed 7, saved once
    beside the work dir as NAME; its path."""
    path = os.path.join(os.path.dirname(os.path.abspath(args.work)), name)
    if os.path.exists(path):
        return path
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data",
                        "tinyshakespeare.txt")
    tmp = "%s.%d.tmp" % (path, os.getpid())  # scenarios running at once each write their own
    cmd = [args.mpiexec, "--oversubscribe", "-np", "1", args.meshtrain] + model + [
        "--batch", "4", "--steps", "2", "--eval-every", "0", "--quiet", "--seed", "7",
        "--data", data, "--save-final", tmp]
    subprocess.run(cmd, capture_output=True, env=mpi_env(), timeout=300, check=True)
    os.rename(tmp, path)
    return path


def checkpoint(args):
    """The model: 2 training steps on the built-in corpus, saved once into the work dir. A
    `--kv-heads K` among the mesh flags makes it a model of K kv heads (its own checkpoint) and
    sets args.pools, the KV pools of a replica: |Y|/K where the tensor axis has more ranks than K
    (the AllToAll layout, the ranks sharing a kv head splitting the sequences), else 1."""
    args.pools, model = 1, list(MODEL)
    if "--kv-heads" in args.mesh:
        i = args.mesh.index("--kv-heads")
        k = args.mesh[i + 1]
        del args.mesh[i:i + 2]
        model[model.index("--kv-heads") + 1] = k
        axes = dict(a.split("=") for a in args.mesh[args.mesh.index("--mesh") + 1].split(","))
        y = int(axes[args.mesh[args.mesh.index("--tensor") + 1]])
        args.pools = y // int(k) if y > int(k) and "--kv-replicate" not in args.mesh else 1
    args.ckpt = trained(args, "serve_http_ck%s.h5" % ("" if model == MODEL else "_k" + k), model)


def script_args(argv):
    """MPIEXEC MESHTRAIN WORKDIR NP [mesh flags...] into args (the work dir made); SIGTERM and
    SIGINT (CTest's or a user's) exit, so that every finally stops its server."""
    class A:
        pass
    args = A()
    args.mpiexec, args.meshtrain, args.work, np_ = argv[:4]
    args.np, args.mesh = int(np_), argv[4:]
    os.makedirs(args.work, exist_ok=True)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(1))
    return args


def generate(args, prompts, tokens, extra=()):
    """`meshtrain generate` on the prompts at once: each continuation, decoded as a client does."""
    cmd = [args.mpiexec, "--oversubscribe", "--bind-to", "none", "-np", "1", args.meshtrain,
           "generate", "--quiet", "--tokens", str(tokens), "--ckpt", args.ckpt] + list(extra)
    for i, a in enumerate(args.mesh[:-1]):  # the server's precision, generate's too
        if a in ("--kv-dtype", "--compute-dtype"):
            cmd += [a, args.mesh[i + 1]]
    for p in prompts:
        cmd += ["--prompt", p]
    out = subprocess.run(cmd, capture_output=True, env=mpi_env(), timeout=300, check=True).stdout
    res, at = [], 0
    for p in prompts:  # each line: the prompt's bytes, `tokens` bytes, a newline
        pb = p.encode()
        assert out[at:at + len(pb)] == pb, "generate's output is not in prompt order"
        res.append(out[at + len(pb):at + len(pb) + tokens].decode("utf-8", errors="replace"))
        at += len(pb) + tokens + 1
    return res


def book_price_check(s, args, max_tokens, what):
    """The live server's book price (/metrics' meshtrain_step_book_seconds_total, the figure of
    its report lines) of everything it has run, which must be one request alone from a fresh
    server with max_tokens tokens: its prefill (chunks of the printed --prefill-chunk, the last
    sampling) and max_tokens - 1 decode steps, each priced by hand by the book's roofline
    T = KV/BW + max(FLOPs/C, weight bytes/BW) from MODEL's shape (--kv-heads of the mesh flags),
    the bytes of a weight element (2 under --compute-dtype bf16: the matrices' bf16 copies; the
    norms' gains and the embedding rows 4), a cache element's, and the BW and C the server
    printed at start-up. The replica's tensor degree nY from the mesh flags, its pools
    args.pools."""
    wait_for(lambda: s.metrics()["meshtrain_steps_total"] > 0 and
             s.metrics()["meshtrain_kv_blocks_used"] == 0, 30)
    m = s.metrics()
    log = open(s.log).read()
    bw, c = (float(x) * 1e9 for x in
             re.search(r"measured BW ([0-9.]+) GB/s, C ([0-9.]+) GFLOP/s", log).groups())
    chunk = int(re.search(r"prefill-chunk (\d+)", log).group(1))
    flag = dict(zip(args.mesh, args.mesh[1:]))
    eb = {"bf16": 2, "fp32": 4}
    w_eb = eb.get(flag.get("--compute-dtype"), 4)
    kv_eb = eb.get(flag.get("--kv-dtype"), w_eb)
    L, D, N, H, F, V = 2, 32, 4, 8, 128, 256
    K = int(flag.get("--kv-heads", 2))
    nY = 1
    if "--tensor" in flag:
        axes = dict(a.split("=") for a in flag["--mesh"].split(","))
        nY = int(axes[flag["--tensor"]])
    Kr = max(K, nY)
    layer_read = D * (N + 2 * Kr) * H + N * H * D + 3 * D * F
    layer_mm = D * (N + 2 * K) * H + N * H * D + 3 * D * F
    weights = w_eb * (L * layer_read + D * V) + 4 * (2 * L + 1) * D * nY
    P = int(m["meshtrain_prompt_tokens_total"])
    items = [(min(chunk, P - p0), p0, p0 + chunk >= P) for p0 in range(0, P, chunk)]
    items += [(1, P + i, True) for i in range(max_tokens - 1)]
    want = 0.0
    for n, p0, sample in items:  # one item a step: (rows, first position, samples a token)
        att = n * p0 + n * (n + 1) / 2  # positions attended
        flops = 2 * n * L * layer_mm + 4 * att * L * N * H + (2 * D * V if sample else 0)
        kv = (att + n) * 2 * L * (Kr / args.pools) * H * kv_eb
        want += kv / bw + max(flops / c, (weights + 4 * n * D) / bw)
    got = m["meshtrain_step_book_seconds_total"]
    tol = want * (0.006e9 / bw + 0.006e9 / c)  # BW and C as printed: to 0.005 GB/s, GFLOP/s
    check(m["meshtrain_steps_total"] == len(items) and abs(got - want) <= tol,
          "%s: the live server's book price, %d steps of %d prompt tokens + %d, is %.6f ms, by "
          "hand %.6f ms (%d B a weight element, BW %.2f GB/s, C %.2f GFLOP/s as printed)" %
          (what, m["meshtrain_steps_total"], P, max_tokens - 1, 1e3 * got, 1e3 * want, w_eb,
           bw / 1e9, c / 1e9))


def wait_for(pred, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False
