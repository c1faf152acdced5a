"""What the flag walks (flag_walk.py, flag_walk_serve.py) share: the environment of their runs,
a run in a directory of its own, and whether an output differs from the base beyond its noise.

The environment keeps start-up cheap, for a walk is hundreds of short runs: MESHTRAIN_QUICK_START
(no kernel timing), Open MPI's ob1 messaging layer named outright (what it picks on a host without
a fabric, after trying the others for ~0.2 s a launch) and, for a run without mpirun, a singleton
that starts no daemon (~0.1 s more).
"""
import os
import re
import shutil
import subprocess

ENV = dict(os.environ, MESHTRAIN_QUICK_START="1", OMPI_MCA_rmaps_base_oversubscribe="1",
           OMPI_MCA_pml="ob1", OMPI_MCA_ess_singleton_isolated="1")
NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
ERROR = re.compile(r"^(?:meshtrain|meshbench): error: (.*)$", re.M)


def split_context(words, np):
    """A context's words: its np=N (else np), the rest, and the flags after "!" (the base's, to
    drop)."""
    extra, drop = [], set()
    for w in words:
        if w.startswith("np="):
            np = int(w[3:])
        elif w.startswith("!"):
            drop.add(w[1:])
        else:
            extra.append(w)
    return np, extra, drop


def fresh_dir(work, name):
    cwd = os.path.join(work, "runs", name)
    shutil.rmtree(cwd, ignore_errors=True)
    os.makedirs(cwd)
    return cwd


def files_text(cwd):
    """The files a run wrote (the text of its .jsonl/.json/.csv/.txt ones)."""
    files = []
    for root, _, names in os.walk(cwd):
        for n in sorted(names):
            path = os.path.join(root, n)
            body = ""
            if n.endswith((".jsonl", ".json", ".csv", ".txt")):
                body = open(path, errors="replace").read()
            files.append(f"file {os.path.relpath(path, cwd)}\n{body}")
    return "\n".join(files)


def env_of(argv, work, name):
    """ENV, and for a singleton a session directory of its own (isolated singletons all take
    job 0, so two at once would share one)."""
    if os.path.basename(argv[0]).startswith(("mpirun", "mpiexec", "orterun")):
        return ENV
    tmp = os.path.join(work, "tmp", name)
    os.makedirs(tmp, exist_ok=True)
    return dict(ENV, OMPI_MCA_orte_tmpdir_base=tmp)


def setup_run(argv, work, name):
    """A run the walk needs before it starts (a checkpoint, a --help to read), in the session
    directory env_of gives it: isolated singletons started by walks running side by side would
    otherwise share job 0's. Its stdout; on failure its stderr is printed and the walk stops."""
    p = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                       env=env_of(argv, work, name))
    if p.returncode != 0 and "--help" not in argv:
        raise SystemExit(f"setup run {name} failed with status {p.returncode}: {' '.join(argv)}\n"
                         f"{p.stderr}")
    return p.stdout


def run(argv, work, name, timeout=180):
    """Status, everything it said and the files it wrote, in a directory of its own; and stderr."""
    cwd = fresh_dir(work, name)
    try:
        p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors="replace",
                           env=env_of(argv, work, name), timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = 124, "", "timed out"
    text = f"status {rc}\n" + out + err + files_text(cwd)
    return rc, text.replace(cwd, "CWD"), err


def lines(text):
    """Each line as (its text with the numbers masked and spaces collapsed, its numbers)."""
    return [(" ".join(NUM.sub("#", l).split()), NUM.findall(l)) for l in text.splitlines()]


def changed(b1, b2, f):
    """Whether f differs from the base beyond the noise seen between b1 and b2 (two base runs)."""
    L1, L2, LF = lines(b1), lines(b2), lines(f)
    if [m for m, _ in L1] != [m for m, _ in L2]:  # noisy structure: compare the stable lines
        stable = set(b1.splitlines()) & set(b2.splitlines())
        return bool(stable - set(f.splitlines())) or \
            bool({m for m, _ in LF} - {m for m, _ in L1} - {m for m, _ in L2})
    if [m for m, _ in LF] != [m for m, _ in L1]:
        return True
    for (m, n1), (_, n2), (_, nf) in zip(L1, L2, LF):
        for a, b, c in zip(n1, n2, nf):
            if a == b and c != a:
                return True
    return False


def refused(rc, err):
    """Bad input as it must end: status 2 and exactly one error line."""
    return rc == 2 and len(ERROR.findall(err)) == 1


def error_line(err):
    m = ERROR.search(err)
    return m.group(1) if m else ""
