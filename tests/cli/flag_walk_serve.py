#!/usr/bin/env python3
"""The flag walk of `meshtrain serve` (over HTTP and with --simulate), `prepare` and `ckpt`.

usage: flag_walk_serve.py MODE MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
MODE: serve (the server: HTTP), serve-sim (serve --simulate: the virtual clock), prepare-ckpt.

The flags come from the commands' own --help (meshtrain's table and serve's, ckpt's usage), never
from a list kept here, and each must have an entry below: a new flag cannot be forgotten.
  - bad values: each flag given a value it cannot take ends the run with status 2 and one error
    line naming the flag, before anything listens (the walk's singletons; serve's own flags also
    on 3 ranks, where one rank must say it and every rank exit 2);
  - no flag ignored: each flag given a good value changes what the command does, or is refused
    with one error line naming it. "What it does" is its status, output and files and, for the
    server, its answers to a fixed request (POST /v1/completions {"prompt": "ab"}, sampled with
    the server's defaults) and GET /v1/models; the server is then stopped with SIGTERM, so its
    drain line counts too. Numbers that differ between two runs of the base are noise (flag_walk.py).
A case needing ranks runs under mpirun, the rest without it (a singleton starts in ~0.05 s).
Every server is started here and stopped on every exit path (its process group: SIGTERM, then
SIGKILL; mpirun --timeout for the rest).
"""
import concurrent.futures as cf
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from walk_common import changed, env_of, error_line, files_text, fresh_dir, refused, run, \
    setup_run
from walk_common import split_context

MODE, MPI, MT, TXT, WORK = sys.argv[1:6]
MODEL = "--layers 2 --d-model 32 --heads 4 --d-ff 64 --seq-len 32"
BASES = {
    "serve": "serve --port 0 --ckpt {res}/ck1.h5",
    "serve-sim": f"serve {MODEL} --simulate {{res}}/work.jsonl --sim-out s.jsonl "
                 "--sim-machine 30,120",
}

# flag -> (good value, context): as in flag_walk.py ("np=N" ranks, flags given to both runs,
# "needs ..." when the flag alone must be refused, "only ..." when the value is the default but
# in the context, "!FLAG" drops a flag of the base). One table per mode; "*" rows are both modes'.
COMMON = {
    "layers": ("3", ""), "d-model": ("64", ""), "heads": ("2", ""), "kv-heads": ("2", ""),
    "head-dim": ("16", ""), "d-ff": ("96", ""), "seq-len": ("64", ""), "vocab": ("300", ""),
    "experts": ("4", ""), "moe-top-k": ("1", "needs {moe}"), "moe-every": ("2", "needs {moe}"),
    "shared-experts": ("1", "needs {moe}"), "expert-d-ff": ("32", "needs {moe}"),
    "capacity-factor": ("0.5", "needs {moe}"),
    "aux-loss-coef": ("0.5", ""), "router-z-loss-coef": ("0.5", ""),
    "batch": ("8", ""), "micro-batch": ("2", ""), "steps": ("4", ""), "optimizer": ("sgd", ""),
    "lr": ("0.01", ""), "warmup": ("2", ""), "min-lr": ("1e-5", ""), "weight-decay": ("0.5", ""),
    "clip": ("0.01", ""), "beta1": ("0.5", ""), "beta2": ("0.9", ""), "eps": ("1e-3", ""),
    "seed": ("7", ""), "data": ("{res}/text.txt", ""), "data-order": ("sequential", ""),
    "eval-every": ("1", ""), "eval-batches": ("2", ""), "sample": ("8", ""),
    "temperature": ("0", ""), "top-k": ("5", ""), "prompt": ("cd", ""),
    "metrics": ("m.jsonl", ""), "save-init": ("i.h5", ""), "save-final": ("f.h5", ""),
    "threads": ("2", ""), "compute-dtype": ("bf16", ""), "kv-dtype": ("bf16", ""),
    "bench": (None, ""), "no-matmul-bound": (None, ""), "quiet": (None, ""), "demo": (None, ""),
    "save-every": ("1", ""), "keep": ("1", ""), "ckpt-dir": ("ck", ""),
    "resume": ("{res}/ck1.h5", ""), "take-over": (None, ""),
    "mesh": ("y=2", "np=2"), "open": ("x", "np=3"), "cross-hosts": ("x", "np=2"), "dp": ("x", "only np=2 --mesh x=1,y=2"),
    "dcn": ("x", "np=2"), "zero": ("1", "np=2"), "tensor": ("x", "np=2"), "expert": ("x", "np=2"),
    "overlap": (None, ""), "progress": ("inline", ""), "alg": ("ring", "np=2 --tensor x"),
    "comm-dtype": ("bf16", ""), "bucket": ("1M", ""), "collective-matmul": ("on", ""),
    "cp": ("x", "np=2"), "cp-alg": ("ring", "np=2 needs --cp x"),
    "emulate": ("v5p", ""), "emulate-rate": ("model", ""), "pipeline": ("x", "np=2"),
    "microbatches": ("4", ""), "schedule": ("1f1b", ""), "virtual-stages": ("4", ""),
    "trace": ("t.json", ""), "debug-collectives": (None, ""), "timeout": ("100", ""),
    # serve's own
    "ckpt": ("{res}/ck2.h5", ""), "host": ("127.0.0.2", ""), "port": ("{port}", ""),
    "kv-block": ("8", ""), "kv-blocks": ("48", ""), "max-batch-tokens": ("128", ""),
    "kv-replicate": (None, ""),  # refused: the base has no tensor axis past K
    "prefill-chunk": ("8", ""), "max-seqs": ("4", ""), "max-queue": ("3", ""),
    "max-tokens": ("5", ""), "drain": ("3", ""), "prefix-cache": ("off", ""),
    "batching": ("static", ""), "draft": ("{res}/ck1.h5", ""),
    "draft-tokens": ("2", "needs --draft {res}/ck1.h5"),
    "draft-ranks": ("1", "needs np=2 --draft {res}/ck1.h5"),
    "prefill-ranks": ("1", "np=2"),
    "prefill-tensor": ("1", "needs np=2 --prefill-ranks 1"),
    "simulate": ("{res}/work.jsonl", "needs --sim-out s.jsonl"),
    "sim-out": ("s.jsonl", ""), "sim-machine": ("30,120", ""),
}
OWN = {  # the rows that differ in a mode
    "serve": {"moe": "--ckpt {res}/moe.h5"},
    "serve-sim": {"moe": "", "moe-top-k": ("1", ""), "moe-every": ("2", ""),
                  "shared-experts": ("1", ""), "expert-d-ff": ("32", ""),
                  "capacity-factor": ("0.5", ""), "ckpt": ("{res}/ck3.h5", "only !--layers"), "simulate": ("{res}/work2.jsonl", ""),
                  "sim-out": ("s2.jsonl", ""), "sim-machine": ("10,50", ""),
                  "prefill-ranks": ("1", "np=2"), "prefill-tensor": ("1", "")},
}
# bad values: flag -> a value it cannot take (None: every value is one it can take). Flags with
# no row get one from their --help metavar (meta_bad).
BAD = {
    "ckpt": "/no/such.h5", "host": "nothost", "port": "70000", "kv-block": "0",
    "kv-blocks": "-1", "max-batch-tokens": "0", "prefill-chunk": "0", "max-seqs": "0",
    "max-queue": "0", "max-tokens": "0", "drain": "-1", "prefix-cache": "yes",
    "simulate": "/no/such.jsonl", "sim-out": "/no/dir/s.jsonl", "sim-machine": "abc",
    "batching": "dynamic", "draft": "/no/such.h5", "prefill-ranks": "0", "draft-tokens": "0",
    "prefill-tensor": "0",
    "prompt": None, "mesh": "abc", "resume": "/no/such.h5", "data": "/no/such.txt",
    "ckpt-dir": "/no/such/dir", "metrics": "/no/dir/m.jsonl", "save-init": "/no/dir/i.h5",
    "save-final": "/no/dir/f.h5", "trace": "/no/dir/t.json",
}
SKIP = {"help"}
# flags a mode takes and ignores, on purpose: flag -> why
INERT = {"serve-sim": {"seed": "bench/serve_bench.sh gives a server and its simulation the same "
                               "model flags; the virtual clock draws nothing"}}


def meta_bad(meta):
    """A bad value by the --help metavar: a word for a number, an unknown choice or axis."""
    if meta is None:
        return "=1"  # a switch given a value
    if "|" in meta or meta in ("ALG", "CHIP"):
        return "bogus"
    if meta in ("AXIS", "AXES"):
        return "q"
    return "abc"


def flag_metas():
    """{flag: its metavar or None} from meshtrain's --help and serve's."""
    out = setup_run([MT, "--help"], WORK, "help")
    metas = dict(re.findall(r"^  --([a-z0-9-]+)(?: ([^ \n]+))?", out, re.M))
    out = setup_run([MT, "serve", "--help"], WORK, "help_serve")
    own = dict(re.findall(r"^  --([a-z0-9-]+)(?: ([^ \n,]+))?", out, re.M))
    metas.update({k: v for k, v in own.items() if k not in metas})
    return {k: (v or None) for k, v in metas.items() if k not in SKIP}, set(own)


def entry(flag):
    return OWN.get(MODE, {}).get(flag) or COMMON.get(flag)


def words(s, res, port=None):
    s = s.replace("{moe}", OWN[MODE]["moe"])
    return [w.replace("{res}", res).replace("{port}", str(port)) for w in s.split()]


def command(base, context, res, flag=None, value=None, port=None):
    """The argv of the base with the context's flags (replacing the base's) and the flag."""
    np, extra, drop = split_context(words(context, res, port), 1)
    if flag:
        drop.add("--" + flag)
    args, out, i = words(base, res), [], 0
    drop |= {w for w in extra if w.startswith("--")}
    while i < len(args):
        takes = args[i].startswith("--") and i + 1 < len(args) and \
            not args[i + 1].startswith("--")
        if args[i] in drop:
            i += 2 if takes else 1
            continue
        out.append(args[i])
        i += 1
    argv = out + extra
    if flag and value is not None and value.startswith("="):
        argv.append(f"--{flag}{value}")
    elif flag:
        argv += ["--" + flag] + (words(value, res, port) if value is not None else [])
    if np > 1:
        return [MPI, "--timeout", "300", "--oversubscribe", "--bind-to", "none", "-np", str(np),
                MT] + argv
    return [MT] + argv


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask(host, port):
    """The fixed requests' answers, as text."""
    out = []
    for method, path, body in (("POST", "/v1/completions", {"prompt": "ab"}),
                               ("GET", "/v1/models", None)):
        try:
            c = http.client.HTTPConnection(host, port, timeout=60)
            c.request(method, path, body=json.dumps(body) if body else None,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read().decode(errors="replace")
            c.close()
            j = json.loads(data)
            for k in ("id", "created"):
                j.pop(k, None)
            out.append(f"{method} {path}: {r.status} {json.dumps(j, sort_keys=True)}")
        except (OSError, ValueError, http.client.HTTPException) as e:
            out.append(f"{method} {path}: {type(e).__name__}")
    return "\n".join(out)


def run_server(argv, name, asked_port=None):
    """A server's run: until it listens (or ends), the fixed requests, SIGTERM. As run()."""
    cwd = fresh_dir(WORK, name)
    outp, errp = os.path.join(cwd, ".out"), os.path.join(cwd, ".err")
    with open(outp, "w") as fo, open(errp, "w") as fe:
        p = subprocess.Popen(argv, cwd=cwd, stdout=fo, stderr=fe, env=env_of(argv, WORK, name),
                             start_new_session=True)
    answers = ""
    try:
        deadline = time.time() + 120
        while time.time() < deadline and p.poll() is None:
            m = re.search(r"listening on http://\[?([^\]/]*?)\]?:(\d+)/", open(errp).read())
            if m:
                port = int(m.group(2))
                answers = ask(m.group(1), port) + \
                    f"\nport {'as asked' if str(port) == str(asked_port) else 'any'}\n"
                pid = re.search(r"rank 0 is pid (\d+)", open(errp).read())
                if pid:  # rank 0 drains and ends the job (mpirun's own SIGTERM path takes ~2 s)
                    os.kill(int(pid.group(1)), signal.SIGTERM)
                    p.wait(60)
                break
            time.sleep(0.02)
    finally:
        stop(p)
    out, err = open(outp).read(), open(errp).read()
    text = f"status {p.returncode}\n" + out + err + answers + files_text(cwd)
    return p.returncode, text.replace(cwd, "CWD"), err


def stop(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(60)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


RUNS = {"singleton": [0, 0.0], "mpirun": [0, 0.0]}


def go(argv, name, port=None):
    t = time.time()
    r = run_server(argv, name, port) if MODE == "serve" else run(argv, WORK, name)
    k = RUNS["mpirun" if argv[0] == MPI else "singleton"]
    k[0], k[1] = k[0] + 1, k[1] + time.time() - t
    return r


BASE_CACHE, BASE_LOCK = {}, threading.Lock()


def base(context, res):
    """The base with the context, run twice (once per context, by whichever thread asks first)."""
    with BASE_LOCK:
        lock = BASE_CACHE.setdefault(context, [threading.Lock(), None])[0]
    with lock:
        if BASE_CACHE[context][1] is None:
            argv = command(BASES[MODE], context, res)
            key = re.sub(r"\W+", "_", context)[:40]
            BASE_CACHE[context][1] = (go(argv, f"base{key}_1")[1], go(argv, f"base{key}_2")[1])
    return BASE_CACHE[context][1]


def attempt(flag, value, context, res, tag):
    port = free_port() if value == "{port}" else None
    return go(command(BASES[MODE], context, res, flag, value, port), f"{flag}{tag}", port)


def verdict(flag, result, context, res):
    """'' when the run changed the base's output or was refused naming the flag, else why."""
    rc, text, err = result
    if refused(rc, err):
        line = error_line(err)
        return "" if f"--{flag}" in line else f"refused without naming --{flag}: {line[:120]}"
    b1, b2 = base(context, res)
    if text.split("\n", 1)[0] == b1.split("\n", 1)[0] and changed(b1, b2, text):
        return ""  # the same status as the base's (a crash is no change)
    return f"status {rc}, " + ("the output unchanged: silently ignored" if rc != 2 else
                               f"{len(re.findall('error:', err))} error lines: {err[:200]}")


def check(flag, res):
    e = entry(flag)
    if e is None:
        return f"FAIL --{flag}: no test value (add one to tests/cli/flag_walk_serve.py)"
    if flag in INERT.get(MODE, {}):
        return f"ok   --{flag:18} taken and unused on purpose: {INERT[MODE][flag]}"
    value, context = e
    needs, only = context.startswith("needs "), context.startswith("only ")
    context = context.replace("needs ", "").replace("only ", "")
    if only:  # the value differs from the default only in the context
        why = verdict(flag, attempt(flag, value, context, res, "_ctx"), context, res)
        return f"FAIL --{flag} {value} with {context}: {why}" if why else \
            f"ok   --{flag:18} with {context}: changes the output or is refused"
    np_only = " ".join(w for w in context.split() if w.startswith("np="))
    alone = attempt(flag, value, np_only, res, "_alone")
    said = error_line(alone[2])
    if refused(alone[0], alone[2]) and said.startswith(f"--{flag} does nothing "):
        return f"ok   --{flag:18} refused whatever else is given: {said[:80]}"
    if needs and not refused(alone[0], alone[2]):
        return f"FAIL --{flag} {value or ''} without {context}: status {alone[0]}, not refused"
    why = verdict(flag, alone, np_only, res)
    if why:
        return f"FAIL --{flag} {value or ''}: {why}"
    if context != np_only:
        why = verdict(flag, attempt(flag, value, context, res, "_ctx"), context, res)
        if why:
            return f"FAIL --{flag} {value or ''} with {context}: {why}"
    return f"ok   --{flag:18} " + (f"refused: {said[:90]}" if said else "changes the output")


def check_bad(flag, meta, res, np=1):
    bad = BAD[flag] if flag in BAD else meta_bad(meta)
    if bad is None:
        return f"ok   --{flag:18} (any value is one it takes)"
    ctx = f"np={np}" + (" --mesh x=3 --dp x" if np == 3 else "")
    rc, _, err = go(command(BASES[MODE], ctx, res, flag, bad), f"bad_{flag}_np{np}")
    line = error_line(err)
    if refused(rc, err) and f"--{flag}" in line:
        return f"ok   --{flag}{bad if bad.startswith('=') else ' ' + bad} (np {np}): {line[:90]}"
    return (f"FAIL --{flag} {bad} on {np} ranks: status {rc} (want 2), "
            f"{len(re.findall(r'error:', err))} error lines (want 1 naming --{flag}): "
            f"{err.strip()[:300]}")


def on_ranks(metas, own):
    """serve's flags whose bad values are also tried on 3 ranks: those its parser does not check
    (a path, an address: checked later, by rank 0 or by all), and one number and one choice for
    the parser's checks, the same code on every rank."""
    strs = [f for f in sorted(own) if metas[f] == "STR"]
    num = [f for f in sorted(own) if metas[f] == "N"][:1]
    word = [f for f in sorted(own) if metas[f] not in ("N", "STR")][:1]
    return strs + num + word


def prepare(res):
    os.makedirs(res, exist_ok=True)
    with open(TXT, "rb") as f, open(os.path.join(res, "text.txt"), "wb") as g:
        g.write(f.read()[:100000])
    with open(os.path.join(res, "work.jsonl"), "w") as f:
        for i, (t, p, n) in enumerate([(0, "ab", 4), (0.001, "First Citizen:", 6),
                                       (0.002, "ROMEO:", 3), (0.01, "To be", 5)]):
            f.write(json.dumps({"t": t, "prompt": p, "max_tokens": n}) + "\n")
    with open(os.path.join(res, "work2.jsonl"), "w") as f:
        f.write(json.dumps({"t": 0, "prompt": "xyz", "max_tokens": 2}) + "\n")
    train = [MT] + MODEL.replace("--layers 2 ", "").split() + ["--batch", "4", "--eval-every", "0", "--quiet", "--data",
                                    os.path.join(res, "text.txt"), "--warmup", "1"]
    for name, extra in (("ck1", ["--steps", "2", "--layers", "2"]),
                        ("ck2", ["--steps", "3", "--layers", "2"]),
                        ("ck3", ["--steps", "1", "--layers", "3"]),
                        ("moe", ["--steps", "1", "--layers", "2", "--experts", "4"])):
        setup_run(train + extra + ["--save-final", os.path.join(res, name + ".h5")], WORK,
                  "prep_" + name)


# prepare and ckpt: flag -> (bad values, a good value for ckpt diff, the subcommands refusing it)
SMALL = {"tol": (["abc", "-1", "nan", "=x", ""], "1e6", ["info"])}


def small_case(argv, np, want, frag):
    """One run of prepare or ckpt: status want; when 2, one error line holding frag."""
    if np > 1:
        argv = [MPI, "--timeout", "120", "--oversubscribe", "-np", str(np)] + argv
    name = re.sub(r"\W+", "_", " ".join(argv[-4:]))[-50:] + f"_np{np}"
    rc, text, err = go(argv, name)
    if rc == want and (want != 2 or (refused(rc, err) and frag in error_line(err))):
        return f"ok   [{' '.join(argv[argv.index(MT) + 1:])[-80:]}] np {np}: status {rc} " \
            f"{error_line(err)[:80]}", text
    return f"FAIL [{' '.join(argv)}] np {np}: status {rc} (want {want}), want one error line " \
        f"holding '{frag}': {err.strip()[:300]}", text


def walk_prepare_ckpt(res):
    """prepare's and ckpt's flags (from their --help) and their positional arguments."""
    usage = setup_run([MT, "ckpt", "--help"], WORK, "help_ckpt") + \
        setup_run([MT, "prepare", "--help"], WORK, "help_prepare")
    flags = sorted(set(re.findall(r"\[--([a-z][a-z-]*)", usage)))
    a, b, txt = f"{res}/ck1.h5", f"{res}/ck2.h5", f"{res}/text.txt"
    cases = []  # (argv after meshtrain, np, status wanted, fragment)
    for cmd in (["prepare", txt, "o.h5"], ["ckpt", "info", a], ["ckpt", "diff", a, b]):
        cases += [(cmd + ["--help"], 1, 0, ""), (cmd + ["--bogus"], 1, 2, "--bogus"),
                  (cmd + ["extra"], 1, 2, "got")]
    cases += [(["prepare", "/no/such.txt", "o.h5"], 3, 2, "TEXT /no/such.txt"),
              (["prepare", res, "o.h5"], 1, 2, "is a directory"),
              (["prepare", txt, "/no/dir/o.h5"], 1, 2, "OUT.h5 /no/dir/o.h5"),
              (["ckpt", "info", res], 1, 2, "is a directory"),
              (["ckpt", "diff", a, "/no/such.h5"], 3, 2, "/no/such.h5"),
              (["ckpt", "info", a, "--bogus"], 3, 2, "--bogus"), (["ckpt"], 1, 2, "info or diff")]
    out, fails = [], 0
    for f in flags:
        if f not in SMALL:
            out.append(f"FAIL --{f}: no entry (add one to SMALL in tests/cli/flag_walk_serve.py)")
            continue
        bads, good, refusing = SMALL[f]
        for v in bads:
            cases.append((["ckpt", "diff", a, b] + ([f"--{f}{v}"] if v.startswith("=") else
                                                    [f"--{f}"] + ([v] if v else [])),
                          1, 2, f"--{f}"))
        cases.append((["ckpt", "diff", a, b, f"--{f}", bads[0]], 3, 2, f"--{f}"))
        cases += [(["ckpt", sub, a, f"--{f}", good], 1, 2, f"--{f}") for sub in refusing]
    with cf.ThreadPoolExecutor(max_workers=3) as ex:
        res_ = list(ex.map(lambda c: small_case([MT] + c[0], c[1], c[2], c[3]), cases))
        # each good value changes what diff says of two different checkpoints
        diff = [MT, "ckpt", "diff", a, b]
        runs = [(diff, "diff_base1"), (diff, "diff_base2")] + \
            [(diff + [f"--{f}", SMALL[f][1]], f"diff_{f}") for f in flags if f in SMALL]
        texts = list(ex.map(lambda r: go(*r)[1], runs))
    out += [v for v, _ in res_]
    for f, text in zip([f for f in flags if f in SMALL], texts[2:]):
        out.append(f"{'ok  ' if changed(texts[0], texts[1], text) else 'FAIL'} --{f} "
                   f"{SMALL[f][1]}: ckpt diff's output {'changes' if changed(texts[0], texts[1], text) else 'unchanged'}")
    return out


def main():
    import shutil
    shutil.rmtree(WORK, ignore_errors=True)
    res = os.path.join(WORK, "res")
    prepare(res)
    if MODE == "prepare-ckpt":
        out = walk_prepare_ckpt(res)
        print("\n".join(out))
        fails = sum(v.startswith("FAIL") for v in out)
        print(f"flag_walk prepare-ckpt: {len(out)} cases, {fails} failure(s)")
        sys.exit(1 if fails else 0)
    metas, own = flag_metas()
    flags = list(metas)
    # meshtrain's own flags are parsed as in the server: --simulate walks serve's bad values only
    bad_flags = flags if MODE == "serve" else sorted(own)
    with cf.ThreadPoolExecutor(max_workers=3) as ex:
        bad = list(ex.map(lambda f: check_bad(f, metas[f], res), bad_flags))
        if MODE == "serve":
            bad += list(ex.map(lambda f: check_bad(f, metas[f], res, 3), on_ranks(metas, own)))
        used = list(ex.map(lambda f: check(f, res), flags))
    for v in bad + used:
        print(v)
    fails = sum(v.startswith("FAIL") for v in bad + used)
    print("runs: " + ", ".join(f"{n} {k} ({t:.0f} s)" for k, (n, t) in RUNS.items()))
    print(f"flag_walk {MODE}: {len(flags)} flags ({len(own)} serve's own), bad values "
          f"{len(bad)} runs, {fails} failure(s)")
    sys.exit(1 if fails else 0)


main()
