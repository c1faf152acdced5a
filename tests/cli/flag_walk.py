#!/usr/bin/env python3
"""Every flag of a command, in every mode, changes what the command does or is refused.

usage: flag_walk.py MODE MPIEXEC MESHTRAIN MESHBENCH TEXT_FILE WORK_DIR
MODE: train, bench (meshtrain --bench), generate, generate-bench (generate --bench), meshbench.

The flags come from the commands' own --help, which their flag tables print (meshtrain's config
table, generate's table, meshbench's table), never from a list kept here. For each flag the test
runs the mode's base command with and without the flag set to the test value below (TESTS):
  - the run with the flag must differ from the one without (its exit status, stdout, stderr, or
    the files it writes), or be refused: status 2 with one error line;
  - when the entry gives a context (the flags that make it matter: --eval-batches needs
    --eval-every), the flag must also change the output with that context given to both runs.
A flag with no entry in TESTS fails the test: a new flag cannot be forgotten.

Timing varies from run to run, so the base runs twice: numbers that differ between those two runs
are noise and ignored; everything else (the text around the numbers and every number that
repeats, such as losses) must match for "unchanged".
"""
import concurrent.futures as cf
import os
import re
import shutil
import subprocess
import sys
import threading

from walk_common import changed, refused, setup_run, split_context
from walk_common import run as run_in

MODE, MPI, MT, MB, TXT, WORK = sys.argv[1:7]
MODEL = "--layers 2 --d-model 32 --heads 4 --d-ff 64 --seq-len 16"
BASES = {
    "train": f"{MODEL} --batch 4 --steps 3 --warmup 1 --lr 0.05 --eval-every 0 "
             "--data {res}/text.txt",
    "bench": f"{MODEL} --batch 4 --steps 1 --warmup 1 --lr 0.05 --bench",
    "generate": f"generate {MODEL} --prompt ab --prompt cd --prompt ef --prompt gh --tokens 4",
    "generate-bench": "generate --bench --bench-batches 1 --bench-prompt 4 --tokens 2",
    "meshbench": "--begin 4K --end 4K --iters 1 --warmup 0 --chip v5p",  # --chip: no ping-pong
}
NP = {}  # ranks of the base (1: no mpirun); a context's "np=N" asks for more

# flag -> {modes: (value, context)}; value None: a switch. "*" is every mode. context: "np=N" and
# flags given to both runs compared (replacing the base's), "!FLAG" removes a flag of the base;
# "needs ..." marks flags the test flag needs: without them it must be refused, with them change
# the output. Otherwise the context is where it shows: without it the flag must still change the
# output or be refused, never be ignored.
M4 = "np=4 --mesh x=2,y=2"
T = {
    "layers": {"*": ("3", "")},
    "d-model": {"*": ("64", "")},
    "heads": {"*": ("2", "")},
    "kv-heads": {"*": ("2", "")},
    "head-dim": {"*": ("16", "")},
    "d-ff": {"*": ("96", "")},
    "seq-len": {"*": ("32", "")},
    "vocab": {"*": ("300", "")},
    "batch": {"*": ("8", "")},
    "micro-batch": {"*": ("2", "")},
    "steps": {"*": ("4", "")},
    "optimizer": {"*": ("sgd", "")},
    "lr": {"*": ("0.01", "")},
    "warmup": {"*": ("2", "")},
    "min-lr": {"*": ("1e-5", ""), "bench": ("1e-5", "--steps 3")},
    "weight-decay": {"*": ("0.5", "")},
    "clip": {"*": ("0.01", "")},
    "beta1": {"*": ("0.5", "")},
    "beta2": {"*": ("0.9", "")},
    "eps": {"*": ("1e-3", "")},
    "seed": {"*": ("7", "")},
    "data": {"*": ("{res}/other.txt", "")},
    "data-order": {"*": ("sequential", "")},
    "eval-every": {"*": ("1", "")},
    "eval-batches": {"*": ("2", "needs --eval-every 1")},
    "sample": {"*": ("8", "")},
    "temperature": {"*": ("0.2", "needs --sample 8"), "generate": ("0.2", "")},
    "top-k": {"*": ("5", "needs --sample 8"), "generate": ("5", "")},
    "prompt": {"*": ("cd", "needs --sample 8"), "generate": ("cd", "")},
    "metrics": {"*": ("m.jsonl", "")},
    "save-init": {"*": ("i.h5", "")},
    "save-final": {"*": ("f.h5", "")},
    "threads": {"*": ("2", "")},
    "bench": {"*": (None, "")},
    "no-matmul-bound": {"*": (None, "")},
    "quiet": {"*": (None, "")},
    "demo": {"*": (None, "")},
    "save-every": {"*": ("1", "")},
    "keep": {"*": ("1", "needs --save-every 1")},
    "ckpt-dir": {"*": ("ck", "needs --save-every 1")},
    "resume": {"*": ("{res}/ck1.h5", "--steps 4")},
    "take-over": {"*": (None, "needs --save-every 1 --ckpt-dir {res}/owned")},
    "mesh": {"*": ("y=2", "np=2")},
    "open": {"*": ("x", "np=3 --batch 6"),
             "generate": ("x", "np=3 --prompt ab --prompt cd --prompt ef")},
    "cross-hosts": {"*": ("y", M4), "generate-bench": ("y", M4 + " --bench-batches 4")},
    "dp": {"*": ("yx", M4), "generate-bench": ("yx", M4 + " --bench-batches 4")},
    "dcn": {"*": ("x", M4)},
    "zero": {"*": ("1", "np=2")},
    "tensor": {"*": ("x", "np=2")},
    "overlap": {"*": (None, "np=2")},
    "progress": {"*": ("inline", "np=2 needs --overlap")},
    "alg": {"*": ("ring", "np=2"), "generate": ("ring", "np=2 needs --tensor x")},
    "comm-dtype": {"*": ("bf16", "np=2")},
    "compute-dtype": {"*": ("bf16", "")},
    "kv-dtype": {"*": ("bf16", "")},
    "bucket": {"*": ("1M", "np=2")},
    "collective-matmul": {"*": ("on", "np=2 needs --tensor x")},
    "emulate": {"*": ("v5p", "")},
    "emulate-rate": {"*": ("model", "needs --emulate v5p")},
    "pipeline": {"*": ("x", "np=2")},
    "microbatches": {"*": ("4", "np=2 needs --pipeline x")},
    "schedule": {"*": ("1f1b", "np=2 needs --pipeline x")},
    "virtual-stages": {"*": ("4", "np=2 needs --pipeline x --schedule interleaved --microbatches 4 "
                                  "--layers 8"),
                       "generate": ("4", ""), "generate-bench": ("4", "")},
    "experts": {"*": ("4", "")},
    "moe-top-k": {"*": ("1", "needs --experts 4")},
    "moe-every": {"*": ("2", "needs --experts 4")},
    "shared-experts": {"*": ("1", "needs --experts 4")},
    "expert-d-ff": {"*": ("32", "needs --experts 4")},
    "capacity-factor": {"*": ("0.5", "needs --experts 4")},
    "expert": {"*": ("x", "np=2 needs --mesh x=2 --dp x --experts 4"),
               "generate-bench": ("x", "np=2 needs --mesh x=2 --dp x --experts 4 --bench-batches 2")},
    "aux-loss-coef": {"*": ("0.5", "needs --experts 4")},
    "router-z-loss-coef": {"*": ("0.5", "needs --experts 4")},
    "cp": {"*": ("x", "np=2")},
    "cp-alg": {"*": ("ring", "np=2 needs --cp x"), "bench": ("ring", "np=2"),
               "generate": ("ring", "np=2"), "generate-bench": ("ring", "np=2")},
    "trace": {"*": ("t.json", "")},
    "debug-collectives": {"*": (None, "np=2")},
    "timeout": {"*": ("100", "")},
    # generate's own
    "ckpt": {"*": ("{res}/ck1.h5", "")},
    "prompts": {"*": ("{res}/prompts.txt", "!--prompt")},
    "tokens": {"*": ("3", "")},
    "kv-replicate": {"*": (None, "np=4 needs --mesh y=4 --tensor y --kv-heads 2")},
    "kv-shard": {"*": ("x", "np=2")},
    "bench-batches": {"*": ("2", "")},
    "bench-prompt": {"*": ("5", "")},
    "csv": {"*": ("g.csv", "")},
    "draft": {"*": ("{res}/ck1.h5", "")},
    "draft-tokens": {"*": ("2", "needs --draft {res}/ck1.h5"), "generate-bench": ("2", "")},
    # meshbench's
    "begin": {"*": ("1K", "")},
    "end": {"*": ("8K", "")},
    "factor": {"*": ("4", "needs --end 16K")},
    "warmup:meshbench": {"*": ("1", "")},
    "iters": {"*": ("2", "")},
    "reps": {"*": ("2", "")},
    "check": {"*": ("0", "")},
    "op": {"*": ("ar", "")},
    "alg:meshbench": {"*": ("ring", "np=2")},
    "axes": {"*": ("x", "only np=4 --mesh 2x2")},
    "mesh:meshbench": {"*": ("1x2", "np=2")},
    "open:meshbench": {"*": ("x", "np=3")},
    "cross-hosts:meshbench": {"*": ("y", "np=4 --mesh 2x2 --placement")},
    "emulate:meshbench": {"*": ("v5e", "")},
    "flops": {"*": ("1e12", "needs --emulate v5e")},
    "chunk": {"*": ("1K", "np=2 --alg ring")},
    "link": {"*": ("1e8,1e-4", "np=2")},
    "chip": {"*": ("v5e", "np=2")},
    "csv:meshbench": {"*": ("b.csv", "")},
    "json": {"*": ("b.json", "")},
    "pingpong": {"*": (None, "np=2 needs !--chip")},
    "placement": {"*": (None, "")},
    "no-data": {"*": (None, "needs --check 0")},
}
SKIP = {"help"}  # prints the help and exits: no run to compare


def flags_of(mode):
    """The flags the mode's command lists in its --help (its flag table)."""
    if mode == "meshbench":
        out = setup_run([MB, "--help"], WORK, "help_mb")
        return re.findall(r"^  (?:-\w, )?--([a-z0-9-]+)", out, re.M)
    out = setup_run([MT, "--help"], WORK, "help")
    names = re.findall(r"^  --([a-z0-9-]+)", out, re.M)
    if mode.startswith("generate"):
        out = setup_run([MT, "generate", "--help"], WORK, "help_gen")
        names += re.findall(r"^  --([a-z0-9-]+)", out, re.M)
    return names


def entry(flag, mode):
    e = T.get(f"{flag}:{mode}") or T.get(flag)
    if e is None:
        return None
    return e.get(mode) or e.get("*")


def parse_words(s, res):
    return [w.replace("{res}", res) for w in s.split()]


def command(mode, flag, value, context, cwd, res):
    """The argv (under mpirun when np > 1) of the base with the context, and flag when given."""
    np, extra, remove = split_context(parse_words(context, res), NP.get(mode, 1))
    args = parse_words(BASES[mode], res)
    if flag:
        remove.add("--" + flag)
    set_by_extra = {w for w in extra if w.startswith("-")}
    out, i = [], 0
    while i < len(args):
        a = args[i]
        takes = a.startswith("-") and i + 1 < len(args) and not args[i + 1].startswith("-")
        if a in remove or a in set_by_extra:
            i += 2 if takes else 1
            continue
        out.append(a)
        i += 1
    if flag:  # the context's own setting of the flag under test gives way to the test value
        j, kept = 0, []
        while j < len(extra):
            if extra[j] == "--" + flag:
                j += 2 if j + 1 < len(extra) and not extra[j + 1].startswith("-") else 1
                continue
            kept.append(extra[j])
            j += 1
        extra = kept
    argv = out + extra
    if flag:
        argv += ["--" + flag] + ([value.replace("{res}", res)] if value is not None else [])
    prog = [MB] if mode == "meshbench" else [MT]
    if np > 1:
        return [MPI, "--oversubscribe", "--bind-to", "none", "-np", str(np)] + prog + argv
    return prog + argv


def run(argv, name):
    """Status, output and the files written, in a directory of its own."""
    return run_in(argv, WORK, name)


BASE_CACHE = {}
BASE_LOCK = threading.Lock()


def base(mode, context, res):
    """The base with the context, run twice (once per context, whichever thread asks first)."""
    with BASE_LOCK:
        if context not in BASE_CACHE:
            BASE_CACHE[context] = (threading.Lock(), None)
        lock, _ = BASE_CACHE[context]
    with lock:
        if BASE_CACHE[context][1] is None:
            argv = command(mode, None, None, context, None, res)
            key = re.sub(r"\W+", "_", context)[:40]
            BASE_CACHE[context] = (lock, (run(argv, f"base{key}_1")[1],
                                          run(argv, f"base{key}_2")[1]))
    return BASE_CACHE[context][1]


def check(flag, res):
    e = entry(flag, MODE)
    if e is None:
        return f"FAIL --{flag}: no test value (add one to tests/cli/flag_walk.py)"
    value, context = e
    needs = " needs " in f" {context} "
    only = context.startswith("only ")  # the value differs from the default only there
    context = context.replace("needs ", "").replace("only ", "")
    ctx_words = [w for w in context.split() if not w.startswith("np=")]
    np_only = " ".join(w for w in context.split() if w.startswith("np="))
    if only:
        c1, c2 = base(MODE, context, res)
        rc2, text2, err2 = run(command(MODE, flag, value, context, None, res), f"{flag}_ctx")
        if rc2 == 0 and changed(c1, c2, text2):
            return f"ok   --{flag:18} with {' '.join(ctx_words)}: changes the output"
        return f"FAIL --{flag} {value or ''} with {context}: status {rc2}, output unchanged"
    # alone: the base (with the context's rank count) and the flag
    b1, b2 = base(MODE, np_only, res)
    rc, text, err = run(command(MODE, flag, value, np_only, None, res), f"{flag}_alone")
    if refused(rc, err):
        line = re.search(r"^(?:meshtrain|meshbench): error: (.*)$", err, re.M).group(1)
        alone = f"refused: {line[:100]}"
        if line.startswith(f"--{flag} does nothing in"):  # in this mode, whatever else is given
            return f"ok   --{flag:18} {alone}"
    elif needs:
        return f"FAIL --{flag} {value or ''} without {context}: status {rc}, not refused"
    elif changed(b1, b2, text):
        alone = "changes the output"
    else:
        return f"FAIL --{flag} {value or ''}: status {rc}, the output unchanged: silently ignored"
    if not ctx_words:
        return f"ok   --{flag:18} {alone}"
    c1, c2 = base(MODE, context, res)
    if alone.startswith("refused") and "does nothing in" in c1:
        return f"ok   --{flag:18} {alone[:60]}; its context does nothing in this mode either"
    rc2, text2, err2 = run(command(MODE, flag, value, context, None, res), f"{flag}_ctx")
    m = re.search(r"^(?:meshtrain|meshbench): error: (.*)$", err2, re.M)
    if rc2 == 2 and m and m.group(1).startswith(f"--{flag} does nothing in"):
        return f"ok   --{flag:18} {alone[:60]}; with its context: {m.group(1)[:60]}"
    if rc2 == 0 and changed(c1, c2, text2):
        return f"ok   --{flag:18} {alone[:60]}; with {' '.join(ctx_words)}: changes the output"
    return (f"FAIL --{flag} {value or ''} with {context}: status {rc2}, output "
            f"{'unchanged' if rc2 == 0 else err2.strip()[:200]}")


def prepare(res):
    os.makedirs(res, exist_ok=True)
    shutil.copy(TXT, os.path.join(res, "text.txt"))
    with open(TXT, "rb") as f, open(os.path.join(res, "other.txt"), "wb") as g:
        g.write(f.read()[200000:300000])
    with open(os.path.join(res, "prompts.txt"), "w") as f:
        f.write("xy\nzw\n")
    prep = [MT] + MODEL.split() + ["--batch", "4", "--eval-every", "0", "--quiet", "--data",
                                   os.path.join(res, "text.txt"), "--lr", "0.05", "--warmup", "1"]
    setup_run(prep + ["--steps", "2", "--save-final", os.path.join(res, "ck1.h5")], WORK, "prep1")
    setup_run(prep + ["--steps", "1", "--save-every", "1", "--ckpt-dir", os.path.join(res, "owned")],
              WORK, "prep2")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    res = os.path.join(WORK, "res")
    prepare(res)
    flags = [f for f in dict.fromkeys(flags_of(MODE)) if f not in SKIP]
    mode_switch = {"bench": "bench", "generate-bench": "bench"}.get(MODE)
    flags = [f for f in flags if f != mode_switch]  # the mode itself
    with cf.ThreadPoolExecutor(max_workers=2) as ex:
        verdicts = list(ex.map(lambda f: check(f, res), flags))
    for v in verdicts:
        print(v)
    fails = sum(v.startswith("FAIL") for v in verdicts)
    print(f"flag_walk {MODE}: {len(flags)} flags, {fails} failure(s)")
    sys.exit(1 if fails else 0)


main()
