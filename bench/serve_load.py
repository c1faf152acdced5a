#!/usr/bin/env python3
"""The load generator of bench/serve_bench.sh (python3's standard library only).

  serve_load.py gen KIND OUT --corpus FILE --n N --rate R --seed S --context T [--prefix P]
      A workload, one JSON object a line: "t" (arrival, seconds), "prompt", "max_tokens".
      Arrivals are Poisson (exponential gaps of mean 1/R) at the fixed seed. KIND poisson: each
      prompt is a speech of the corpus (its blocks between blank lines), and its max_tokens the
      length of the speech that answers it, both cut to fit the context (prompt at most T/2,
      prompt + output at most T). KIND shared: every prompt begins with the same P bytes of the
      corpus (a shared system prompt), then a speech.
  serve_load.py run URL WORKLOAD OUT [--sequential]
      Sends each request at its arrival time (open loop; --sequential: one after the other, each
      when the last ended), streaming with vLLM's continuous usage stats, and writes one JSON
      object a line: id, status, t_send, t_first, t_end (seconds from the start), n_prompt,
      n_out, n_first (the tokens the first chunk brought: more than 1 when the server held the
      first back), itl (the gaps between chunks that brought tokens).
  serve_load.py report MEASURED PREDICTED [--slo-ttft S --slo-tpot S --csv PREFIX]
      TTFT, TPOT, ITL and end-to-end latency (mean, p50, p90, p99), request and token
      throughput and goodput (requests/s meeting both SLOs), measured beside the virtual
      clock's prediction (meshtrain serve --simulate), as a table on stdout (with --metrics, the
      server's /metrics at the end, and --sim-log, the simulation's summary: the steps, their
      seconds and their share of the span, measured beside the virtual clock's); with --csv the CDFs
      of TTFT and end-to-end latency as PREFIX_{ttft,e2e}.csv (value, fraction measured,
      fraction predicted) and the table as PREFIX_table.csv.
  serve_load.py model WORKLOAD --shape "MODEL FLAGS" --machine BW,C --batch B[,B...]
      What the two schedulers' throughputs should be on this workload, saturated (the offered load
      above both capacities), from the roofline step cost T(b) = max(T0, b t) with T0 = weight
      bytes / BW (the weights read once a step) and t = FLOPs of a row / C, B_crit = T0 / t. Per
      request: prefill p = E[P] t (compute-bound, the same under both), attention a = E[L (P +
      L/2)] kv bytes / BW (the same), decode c = E[L] max(T0, B t) / B for continuous batching
      (B sequences in every step) and s = E[sum_k max(T0, b_k t)] / B for static batches (b_k of
      the batch's B sequences still running at its k-th step; the batch ends with its longest).
      ratio = (p + a + s) / (p + a + c) against --batching static (finished rows dropped); with a
      flat step (B <= B_crit) and no prefill it is E[max of B lengths] / E[length]. Also against
      --batching static-padded (generate's batch: each prompt padded to the batch's longest, P
      rows a sequence, and every row run until the batch's longest output ends): a + (B P t +
      max L (max(T0, B t) + B th)) / B a request. Columns: B, ms a request under each scheme,
      continuous against static, decode alone against static, continuous against static-padded.
Definitions (vLLM's benchmark_serving): TTFT = first token - send; TPOT = (end - first) /
(n_out - 1) per request of more than one token; ITL = every gap between token-bearing chunks;
E2E = end - send; throughput over the span from the first send to the last end.
"""
import argparse
import http.client
import json
import random
import re
import sys
import threading
import time
import urllib.parse


def speeches(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    return [s.strip("\n") + "\n" for s in text.split("\n\n") if s.strip()]


def cmd_gen(a):
    rng = random.Random(a.seed)
    sp = speeches(a.corpus)
    corpus = open(a.corpus, encoding="utf-8", errors="replace").read()
    prefix = corpus[:a.prefix] if a.kind == "shared" else ""
    t, out = 0.0, []
    max_prompt = a.context // 2
    for _ in range(a.n):
        t += rng.expovariate(a.rate)
        k = rng.randrange(len(sp) - 1)
        prompt = (prefix + sp[k])[:max_prompt]
        if len(prompt) <= len(prefix):
            prompt = (prefix + "\n")[:max_prompt]
        max_tokens = max(1, min(len(sp[k + 1]), a.context - len(prompt), a.max_out))
        out.append({"t": round(t, 6), "prompt": prompt, "max_tokens": max_tokens})
    with open(a.out, "w") as f:
        for r in out:
            f.write(json.dumps(r) + "\n")
    mean_p = sum(len(r["prompt"]) for r in out) / len(out)
    mean_o = sum(r["max_tokens"] for r in out) / len(out)
    print("serve_load gen %s: %d requests over %.1f s (rate %.2f/s), prompt %.0f and output %.0f "
          "tokens on average%s" % (a.kind, len(out), t, a.rate, mean_p, mean_o,
                                   ", shared prefix %d" % len(prefix) if prefix else ""))


def one_request(url, body, t0):
    u = urllib.parse.urlparse(url)
    rec = {"status": 0, "t_send": time.monotonic() - t0, "t_first": None, "t_end": None,
           "n_prompt": len(body["prompt"]), "n_out": 0, "itl": []}
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        c.request("POST", "/v1/completions", body=json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        rec["status"] = r.status
        if r.status != 200:
            r.read()
            rec["t_end"] = time.monotonic() - t0
            return rec
        buf, last, tokens = b"", None, 0
        while True:
            chunk = r.read1(65536)
            if not chunk:
                break
            now = time.monotonic() - t0
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                if not ev.startswith(b"data: ") or ev[6:] == b"[DONE]":
                    continue
                j = json.loads(ev[6:])
                if "error" in j:
                    rec["status"] = 503
                    continue
                n = j.get("usage", {}).get("completion_tokens", tokens)
                if n > tokens:
                    if rec["t_first"] is None:
                        rec["t_first"], rec["n_first"] = now, n
                    elif last is not None:
                        rec["itl"].append(now - last)
                    last, tokens = now, n
        rec["n_out"] = tokens
        rec["t_end"] = time.monotonic() - t0
        c.close()
    except (OSError, http.client.HTTPException) as e:
        rec["error"] = repr(e)
        rec["t_end"] = time.monotonic() - t0
    return rec


def cmd_run(a):
    work = [json.loads(l) for l in open(a.workload) if l.strip()]
    res = [None] * len(work)
    t0 = time.monotonic()

    def go(i):
        body = {"prompt": work[i]["prompt"], "max_tokens": work[i]["max_tokens"],
                "temperature": 0, "stream": True,
                "stream_options": {"continuous_usage_stats": True}}
        res[i] = one_request(a.url, body, t0)
        res[i]["id"] = i
    if a.sequential:
        for i in range(len(work)):
            go(i)
    else:
        threads = []
        for i, w in enumerate(work):
            delay = w["t"] - (time.monotonic() - t0)
            if delay > 0:
                time.sleep(delay)
            threads.append(threading.Thread(target=go, args=(i,)))
            threads[-1].start()
        for th in threads:
            th.join()
    with open(a.out, "w") as f:
        for r in res:
            f.write(json.dumps(r) + "\n")
    ok = sum(1 for r in res if r["status"] == 200)
    print("serve_load run: %d of %d requests answered 200 in %.1f s" %
          (ok, len(res), time.monotonic() - t0))


def pct(v, q):
    if not v:
        return float("nan")
    v = sorted(v)
    i = q / 100 * (len(v) - 1)
    lo = int(i)
    return v[lo] + (v[min(lo + 1, len(v) - 1)] - v[lo]) * (i - lo)


def stats(path, slo_ttft, slo_tpot):
    rs = [json.loads(l) for l in open(path) if l.strip()]
    ok = [r for r in rs if r["status"] == 200 and r["t_first"] is not None]
    ttft = [r["t_first"] - r["t_send"] for r in ok]
    tpot = [(r["t_end"] - r["t_first"]) / (r["n_out"] - 1) for r in ok if r["n_out"] > 1]
    itl = [g for r in ok for g in r["itl"]]
    e2e = [r["t_end"] - r["t_send"] for r in ok]
    span = max(r["t_end"] for r in rs) - min(r["t_send"] for r in rs)
    good = [r for r in ok if r["t_first"] - r["t_send"] <= slo_ttft and
            (r["n_out"] <= 1 or (r["t_end"] - r["t_first"]) / (r["n_out"] - 1) <= slo_tpot)]
    return {"n": len(rs), "ok": len(ok), "span": span, "ttft": ttft, "tpot": tpot, "itl": itl,
            "e2e": e2e, "req_s": len(ok) / span, "tok_s": sum(r["n_out"] for r in ok) / span,
            "total_tok_s": sum(r["n_out"] + r["n_prompt"] for r in ok) / span,
            "goodput": len(good) / span,
            "held": sum(1 for r in ok if r.get("n_first", 1) > 1)}


def steps_line(metrics, sim_log, span):
    """Where the measured span went: the engine's steps (the server's /metrics) against the
    virtual clock's (its summary line), and the rest of the span (the loop, HTTP, idle)."""
    met = {}
    for line in open(metrics):
        if line.startswith("meshtrain_step"):
            k, v = line.split()
            met[k] = float(v)
    sim = open(sim_log).read()
    vt = re.search(r"in ([0-9.]+) s of the virtual clock \| ([0-9]+) steps", sim)
    n, sec = met.get("meshtrain_steps_total", 0), met.get("meshtrain_step_seconds_total", 0)
    if not n or not vt:
        return
    print("steps: measured %d, %.2f s in them (%.0f%% of the %.2f s span), %.2f ms a step; "
          "virtual clock %s, %.2f s, %.2f ms a step" % (
              n, sec, 100 * sec / span, span, 1e3 * sec / n, vt.group(2), float(vt.group(1)),
              1e3 * float(vt.group(1)) / int(vt.group(2))))


def cmd_report(a):
    m, p = stats(a.measured, a.slo_ttft, a.slo_tpot), stats(a.predicted, a.slo_ttft, a.slo_tpot)
    rows = []
    print("%-22s %14s %14s %8s" % ("metric (ms)", "measured", "virtual clock", "meas/pred"))
    for key in ("ttft", "tpot", "itl", "e2e"):
        for name, f in (("mean", lambda v: sum(v) / len(v) if v else float("nan")),
                        ("p50", lambda v: pct(v, 50)), ("p90", lambda v: pct(v, 90)),
                        ("p99", lambda v: pct(v, 99))):
            x, y = 1e3 * f(m[key]), 1e3 * f(p[key])
            rows.append(("%s %s" % (key.upper(), name), x, y))
            print("%-22s %14.2f %14.2f %8.2f" % (rows[-1][0], x, y, x / y if y else float("nan")))
    for key, name in (("req_s", "requests/s"), ("tok_s", "output tokens/s"),
                      ("total_tok_s", "total tokens/s"), ("goodput", "goodput req/s")):
        rows.append((name, m[key], p[key]))
        print("%-22s %14.2f %14.2f %8.2f" % (name, m[key], p[key],
                                              m[key] / p[key] if p[key] else float("nan")))
    print("(%d of %d requests answered; goodput: TTFT <= %g s and TPOT <= %g s; %d first chunks "
          "brought more than one token)" % (m["ok"], m["n"], a.slo_ttft, a.slo_tpot, m["held"]))
    if a.metrics and a.sim_log:
        steps_line(a.metrics, a.sim_log, m["span"])
    if a.csv:
        with open(a.csv + "_table.csv", "w") as f:
            f.write("metric,measured,predicted\n")
            for r in rows:
                f.write("%s,%.6g,%.6g\n" % r)
        for key in ("ttft", "e2e"):
            pts = sorted(set(m[key] + p[key]))
            with open("%s_%s.csv" % (a.csv, key), "w") as f:
                f.write("# seconds, fraction measured <= it, fraction predicted <= it\n")
                for x in pts:
                    f.write("%.6f %.4f %.4f\n" % (
                        x, sum(v <= x for v in m[key]) / max(1, len(m[key])),
                        sum(v <= x for v in p[key]) / max(1, len(p[key]))))


def shape_costs(flags):
    """Weight bytes, FLOPs of a decode row (the sampling head apart), of the head, and KV bytes of
    one position, of the model the flags describe (fp32, vocabulary 256, one replica)."""
    v = dict(zip(flags.split()[0::2], flags.split()[1::2]))
    L, D, N = int(v["--layers"]), int(v["--d-model"]), int(v["--heads"])
    K, F, V = int(v.get("--kv-heads", N)), int(v["--d-ff"]), 256
    H = D // N
    mm = D * (N + 2 * K) * H + N * H * D + 3 * D * F
    return 4 * (L * (mm + 2 * D) + D * V + D), 2 * L * mm, 2 * D * V, 2 * L * K * H * 4


def cmd_model(a):
    work = [json.loads(l) for l in open(a.workload) if l.strip()]
    W, frow, fhead, kvpos = shape_costs(a.shape)
    bw, c = (float(x) * 1e9 for x in a.machine.split(","))
    T0, t, th = W / bw, frow / c, fhead / c
    P = [len(r["prompt"]) for r in work]
    O = [r["max_tokens"] for r in work]
    n = len(work)
    p = sum(P) * t / n
    att = sum(o * (q + o / 2) for q, o in zip(P, O)) * kvpos / bw / n
    print("T0 %.2f ms, t %.3f ms a row: B_crit %.1f; per request: prefill %.1f ms, attention "
          "%.1f ms (E[P] %.0f, E[L] %.0f)" % (T0 * 1e3, t * 1e3, T0 / t, p * 1e3, att * 1e3,
                                               sum(P) / n, sum(O) / n))
    print("%5s %12s %12s %12s %10s %14s %12s" % ("B", "cont ms", "static ms", "s-padded ms",
                                                  "vs static", "decode only", "vs s-padded"))
    for B in (int(x) for x in a.batch.split(",")):
        cont = sum(O) / n * (max(T0, B * t) + B * th) / B
        stat = pad = 0.0
        for i in range(0, n, B):  # static batches take the requests in arrival order
            ls, ps = O[i:i + B], P[i:i + B]
            for k in range(1, max(ls) + 1):
                b = sum(1 for x in ls if x >= k)
                stat += max(T0, b * t) + b * th
            pad += max(ls) * (max(T0, len(ls) * t) + len(ls) * th) + len(ls) * max(ps) * t
        stat, pad = stat / n, pad / n
        print("%5d %12.1f %12.1f %12.1f %9.2fx %13.2fx %11.2fx" % (
            B, (p + att + cont) * 1e3, (p + att + stat) * 1e3, (att + pad) * 1e3,
            (p + att + stat) / (p + att + cont), stat / cont, (att + pad) / (p + att + cont)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("kind", choices=["poisson", "shared"])
    g.add_argument("out")
    g.add_argument("--corpus", required=True)
    g.add_argument("--n", type=int, default=100)
    g.add_argument("--rate", type=float, default=4.0)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--context", type=int, default=256)
    g.add_argument("--prefix", type=int, default=96)
    g.add_argument("--max-out", type=int, default=10 ** 9)
    r = sub.add_parser("run")
    r.add_argument("url")
    r.add_argument("workload")
    r.add_argument("out")
    r.add_argument("--sequential", action="store_true")
    p = sub.add_parser("report")
    p.add_argument("measured")
    p.add_argument("predicted")
    p.add_argument("--slo-ttft", type=float, default=1.0)
    p.add_argument("--slo-tpot", type=float, default=0.05)
    p.add_argument("--csv")
    p.add_argument("--metrics", help="the server's /metrics text at the end of the run")
    p.add_argument("--sim-log", help="meshtrain serve --simulate's summary line")
    m = sub.add_parser("model")
    m.add_argument("workload")
    m.add_argument("--shape", required=True)
    m.add_argument("--machine", required=True)
    m.add_argument("--batch", default="8")
    a = ap.parse_args()
    {"gen": cmd_gen, "run": cmd_run, "report": cmd_report, "model": cmd_model}[a.cmd](a)


if __name__ == "__main__":
    main()
