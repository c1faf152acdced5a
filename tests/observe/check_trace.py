#!/usr/bin/env python3
"""check_trace.py FILE STEPS [--pipeline AXIS]: checks a meshtrain --trace file against the
trace-event format and against itself. Exits 0, or 1 printing every problem found.

Format: a JSON object with a "traceEvents" list; every event has name, ph, pid, tid; "X" events
have ts >= 0 and dur >= 0; "M" metadata name each rank's process "rank R (x=..,...)" with the
coordinates listed in otherData.ranks; async "b"/"e" events pair up by (pid, cat, id, name) with
e.ts >= b.ts.
Consistency:
  - per (pid, tid) the X events appear in file order with non-decreasing ts, and nest (each
    either inside the enclosing open one or after it ends), in whole nanoseconds;
  - every rank has the spans "step 0" .. "step STEPS-1", in order and disjoint, and within each
    at least one layer forward and one layer backward span; every span or call of step k lies
    inside that rank's "step k";
  - every collective call (not a wait) appears on every rank of its axis set: ranks with equal
    coordinates off the set make the same calls, in the same order (set_seq 0, 1, ...), with the
    same op, count and algorithm, and the same number per (step, op, axes);
  - with --pipeline AXIS: the sends a rank posts towards AXIS+1 match the receives of its
    neighbour from AXIS-1 (count, and sizes in order), and the other way round.
"""
import json
import re
import sys
from collections import defaultdict

problems = []


def bad(msg):
    problems.append(msg)
    if len(problems) > 40:
        report()


def report():
    for p in problems[:40]:
        print("check_trace: " + p)
    if len(problems) > 40:
        print("check_trace: ... and more")
    print("check_trace: %s" % ("FAILED" if problems else "ok"))
    sys.exit(1 if problems else 0)


def ns(x):
    return int(round(float(x) * 1000))


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    pipe_axis = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--pipeline" else None
    with open(path) as f:
        doc = json.load(f)  # raises on invalid JSON: the test fails with the parser's message
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        bad("top level must be an object with a traceEvents list")
        report()
    other = doc.get("otherData", {})
    axes = other.get("axes", "")
    coords = {r["rank"]: r["coords"] for r in other.get("ranks", [])}
    if not coords:
        bad("otherData.ranks is missing")
        report()
    events = doc["traceEvents"]

    # -- format
    names = {}
    xs = defaultdict(list)  # (pid, tid) -> X events in file order
    flights = {}
    sends, recvs = defaultdict(list), defaultdict(list)
    for i, e in enumerate(events):
        for k in ("name", "ph", "pid", "tid"):
            if k not in e:
                bad("event %d lacks %r: %s" % (i, k, e))
        ph = e.get("ph")
        if ph == "M":
            if e["name"] == "process_name":
                names[e["pid"]] = e["args"]["name"]
            continue
        if ph not in ("X", "b", "e"):
            bad("event %d has phase %r" % (i, ph))
            continue
        if not isinstance(e.get("ts"), (int, float)) or e["ts"] < 0:
            bad("event %d: bad ts %r" % (i, e.get("ts")))
        if ph == "X":
            if not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
                bad("event %d: bad dur %r" % (i, e.get("dur")))
            xs[(e["pid"], e["tid"])].append(e)
            a = e.get("args", {})
            if e.get("cat") == "p2p" and a.get("op") == "recv":
                recvs[(e["pid"], e["name"])].append(a["count"])
        else:
            key = (e["pid"], e.get("cat"), e.get("id"), e["name"])
            if ph == "b":
                if key in flights:
                    bad("async event %s begins twice" % (key,))
                flights[key] = e
                sends[(e["pid"], e["name"])].append(e["args"]["count"])
            else:
                b = flights.pop(key, None)
                if b is None:
                    bad("async end without begin: %s" % (key,))
                elif ns(e["ts"]) < ns(b["ts"]):
                    bad("async %s ends before it begins" % (key,))
    for key in flights:
        bad("async event %s never ends" % (key,))
    for r, c in coords.items():
        want = "rank %d (%s)" % (r, ",".join("%s=%d" % (axes[k], c[k]) for k in range(len(c))))
        if names.get(r) != want:
            bad("process %d is named %r, expected %r" % (r, names.get(r), want))

    # -- nesting and order per track
    for (pid, tid), lst in xs.items():
        stack, last = [], -1
        for e in lst:
            t0, t1 = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            if t0 < last:
                bad("rank %d thread %d: %r at %s starts before the previous event" %
                    (pid, tid, e["name"], e["ts"]))
            last = t0
            while stack and stack[-1][1] <= t0:
                stack.pop()
            if stack and t1 > stack[-1][1]:
                bad("rank %d thread %d: %r [%d, %d] ns overlaps %r [%d, %d] without nesting" %
                    (pid, tid, e["name"], t0, t1, stack[-1][2], stack[-1][0], stack[-1][1]))
            stack.append((t0, t1, e["name"]))

    # -- steps
    for r in coords:
        caller = xs.get((r, 0), [])
        spans = {}
        for e in caller:
            m = re.fullmatch(r"step (\d+)", e["name"])
            if m and e.get("cat") == "compute":
                spans[int(m.group(1))] = (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
        if sorted(spans) != list(range(steps)):
            bad("rank %d has step spans %s, expected 0..%d" % (r, sorted(spans), steps - 1))
            continue
        for k in range(1, steps):
            if spans[k][0] < spans[k - 1][1]:
                bad("rank %d: step %d starts before step %d ends" % (r, k, k - 1))
        for k in range(steps):
            inside = [e["name"] for e in caller if e["args"].get("step") == k]
            if not any(n.startswith("fwd L") for n in inside):
                bad("rank %d step %d: no layer forward span" % (r, k))
            if not any(n.startswith("bwd L") for n in inside):
                bad("rank %d step %d: no layer backward span" % (r, k))
        for tid in (0, 1):
            for e in xs.get((r, tid), []):
                k = e.get("args", {}).get("step", -1)
                if k >= 0 and not e["name"].startswith("step "):
                    t0, t1 = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
                    if t0 < spans[k][0] or t1 > spans[k][1]:
                        bad("rank %d: %r (step %d) lies outside step %d's span" %
                            (r, e["name"], k, k))

    # -- every collective on every rank of its axis set
    groups = defaultdict(dict)  # (axes, coordinates off the set) -> rank -> [calls]
    for (pid, tid), lst in xs.items():
        for e in lst:
            a = e.get("args", {})
            if e.get("cat") != "collective" or a.get("wait"):
                continue
            off = tuple(coords[pid][k] for k in range(len(axes)) if axes[k] not in a["axes"])
            groups[(a["axes"], off)].setdefault(pid, []).append(
                (a["set_seq"], a["step"], a["op"], a["count"], a["alg"]))
    ncalls = 0
    for (ax, off), per_rank in groups.items():
        members = [r for r in coords
                   if tuple(coords[r][k] for k in range(len(axes)) if axes[k] not in ax) == off]
        ref = None
        for r in members:
            calls = sorted(per_rank.get(r, []))
            if [c[0] for c in calls] != list(range(len(calls))):
                bad("rank %d: calls over %s are numbered %s, not 0, 1, ..." %
                    (r, ax or "{}", [c[0] for c in calls][:10]))
            if ref is None:
                ref, ref_rank = calls, r
            elif calls != ref:
                diff = next((i for i in range(min(len(calls), len(ref))) if calls[i] != ref[i]),
                            min(len(calls), len(ref)))
                bad("ranks %d and %d (axis set %s) differ at call %d: %s vs %s (%d vs %d calls)" %
                    (ref_rank, r, ax or "{}", diff, ref[diff] if diff < len(ref) else None,
                     calls[diff] if diff < len(calls) else None, len(ref), len(calls)))
            ncalls += len(calls)
        counts = defaultdict(lambda: defaultdict(int))
        for r in members:
            for c in per_rank.get(r, []):
                counts[(c[1], c[2])][r] += 1
        for key, by_rank in counts.items():
            if len(set(by_rank.get(r, 0) for r in members)) > 1:
                bad("axis set %s: step %d, %s counts per rank %s" % (ax, key[0], key[1],
                                                                   dict(by_rank)))
    if ncalls == 0:
        bad("no collective calls in the trace")

    # -- pipeline: sends match the neighbour's receives
    if pipe_axis:
        k = axes.index(pipe_axis)
        where = {tuple(c): r for r, c in coords.items()}
        for r, c in coords.items():
            for d in (+1, -1):
                nb = list(c)
                nb[k] += d
                if tuple(nb) not in where:
                    continue
                q = where[tuple(nb)]
                out = sends.get((r, "send to %s%+d" % (pipe_axis, d)), [])
                got = recvs.get((q, "recv from %s%+d" % (pipe_axis, -d)), [])
                if out != got:
                    bad("rank %d sends %d messages to %s%+d, rank %d receives %d from %s%+d" %
                        (r, len(out), pipe_axis, d, q, len(got), pipe_axis, -d))
        if not sends:
            bad("--pipeline: no sends in the trace")
    print("check_trace: %d events, %d ranks, %d collective calls checked across axis sets" %
          (len(events), len(coords), ncalls))
    report()


if __name__ == "__main__":
    main()
