#!/usr/bin/env python3
"""`meshtrain serve` over HTTP, from the client's side (python3's standard library only).

usage: serve_http.py SCENARIO MPIEXEC MESHTRAIN WORKDIR NP [mesh flags...]

Each scenario starts its own server on a free loopback port (--port 0, the port read from the
server's "listening on" line), checks what the server answered, and stops it on every exit path
(the mpirun's process group is ended: SIGTERM, then SIGKILL after 30 s; SIGTERM to this script
does the same, and mpirun's --timeout 600 ends a server this script could not stop). Scenarios:
  basic       /health, /v1/models, greedy and sampled completions equal `meshtrain generate` on
              the same prompt, streaming equal to the whole text, stop strings, every bad
              request (malformed JSON, a prompt longer than the context, max_tokens too large,
              ...) answered 400/404/405/413 with an error object, /metrics consistent with it all;
              the first request's book price (/metrics) equal to the roofline's by hand
  chat        POST /v1/chat/completions (the chat template's prompt, whole and streamed as
              chat.completion.chunk deltas) equal to generate on that prompt; n > 1: choice i
              equals the same request with seed + i, whole and streamed; bad messages get 400;
              the first request's book price by hand, as basic's
  disconnect  a client that closes its stream mid-way: the request is cancelled and its KV blocks
              come back (/metrics), the server still answers
  concurrent  64 clients at once (half streaming), a small pool that forces preemption: every
              text equals the same request alone
  overload    --max-queue 2: the excess get 503 with Retry-After at once, the rest complete
  sigterm     SIGTERM to mpirun with requests running and queued: each finishes or gets an error
              (503 / an SSE error event), none hangs, every rank exits
  virtual_clock  meshtrain serve --simulate (the batcher on the book's roofline clock, machine
              fixed by --sim-machine, so every figure is computed, not timed): every request runs
              to max_tokens with consistent times, the run is deterministic, and in the book's
              model continuous batching beats static batches and the prefix cache cuts TTFT
  draft       --draft CKPT --draft-tokens 3 (a 1-layer drafter): 16 concurrent greedy clients,
              half streaming, on a pool small enough to preempt, get generate's plain greedy
              texts; usage.speculative and /metrics count the drafts, alpha in (0, 1)
  disagg      --prefill-ranks (in the mesh flags): 16 concurrent greedy clients and a sampled one
              get generate's texts, every request's KV shipped (/metrics); then SIGKILL to a
              prefill rank, and in another run to a decode rank, with requests running: mpirun
              ends, every client gets its answer or an error, no rank is left
  page        the page at / in headless Chromium (Debian's chromium; skipped with status 77
              without it): the prompt given in its query string streams into #out, which ends
              equal to the same completion asked for by a client
The model (L=2 D=32 T=64) is a checkpoint after 2 training steps, written once beside WORKDIR: its
bytes are mostly not UTF-8, which the text's checks exercise. Exit 0 when every check passed, 1 otherwise.
"""
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

from serve_lib import *  # noqa: E402,F401,F403  (re-exported: the other scripts use sh.X)
from serve_lib import FAILS, check  # noqa: E402


# ------------------------------------------------------------------------------- scenarios

def scenario_basic(args):
    s = Server(args, "basic", ["--kv-block", "4", "--prefill-chunk", "7"])
    try:
        st, _, body = s.request("GET", "/health")
        check(st == 200 and json.loads(body)["status"] == "ok", "GET /health: 200 ok")
        st, _, body = s.request("GET", "/v1/models")
        check(st == 200 and json.loads(body)["data"][0]["id"] == "meshtrain", "GET /v1/models")
        want = generate(args, PROMPTS[:4], 20, ["--temperature", "0"])
        for p, w in zip(PROMPTS[:4], want):
            st, text, fin, _ = s.complete({"prompt": p, "max_tokens": 20, "temperature": 0})
            check(st == 200 and text == w and fin == "length",
                  "greedy %r: equals generate (%r)" % (p, text[:12]))
            if p == PROMPTS[0]:  # the server's first request
                book_price_check(s, args, 20, "greedy %r alone" % p)
            st, stext, fin, _ = s.complete({"prompt": p, "max_tokens": 20, "temperature": 0,
                                            "stream": True})
            check(st == 200 and stext == w and fin == "length",
                  "greedy %r streamed: the same text, finish_reason length" % p)
        sampled = generate(args, [PROMPTS[1]], 24,
                           ["--temperature", "0.8", "--top-k", "20", "--seed", "5"])[0]
        st, text, _, _ = s.complete({"prompt": PROMPTS[1], "max_tokens": 24, "temperature": 0.8,
                                     "top_k": 20, "seed": 5})
        check(st == 200 and text == sampled, "sampled (T 0.8, top-k 20, seed 5) equals generate")
        # a stop string from the greedy text: the text ends before its first occurrence
        full = want[0]
        stop = next(full[i:i + 2] for i in range(2, len(full) - 2) if "\ufffd" not in full[i:i + 2])
        cut = full[:full.index(stop)]
        for stream in (False, True):
            st, text, fin, _ = s.complete({"prompt": PROMPTS[0], "max_tokens": 20,
                                           "temperature": 0, "stop": [stop, "\u00e9\u00e9"],
                                           "stream": stream})
            check(st == 200 and text == cut and fin == "stop",
                  "stop %r (stream %s): the text before it, finish_reason stop" % (stop, stream))
        bad = [
            ("malformed JSON", None, b'{"prompt": "ROMEO:",', 400),
            ("not an object", None, b'[1, 2]', 400),
            ("no prompt", {"max_tokens": 5}, None, 400),
            ("empty prompt", {"prompt": ""}, None, 400),
            ("prompt longer than the context", {"prompt": "x" * 70, "max_tokens": 1}, None, 400),
            ("max_tokens too large", {"prompt": "ROMEO:", "max_tokens": 100}, None, 400),
            ("max_tokens 0", {"prompt": "ROMEO:", "max_tokens": 0}, None, 400),
            ("max_tokens not an integer", {"prompt": "ROMEO:", "max_tokens": "5"}, None, 400),
            ("negative temperature", {"prompt": "ROMEO:", "temperature": -1}, None, 400),
            ("stream not a boolean", {"prompt": "ROMEO:", "stream": "yes"}, None, 400),
            ("five stop strings", {"prompt": "ROMEO:", "stop": ["a", "b", "c", "d", "e"]}, None,
             400),
            ("n = 9", {"prompt": "ROMEO:", "n": 9}, None, 400),
            ("a body over 1 MB", None, b'{"prompt": "' + b"a" * (1 << 20) + b'"}', 413),
        ]
        for what, body, raw, want_st in bad:
            st, _, data = s.request("POST", "/v1/completions", body, raw)
            try:
                msg = json.loads(data)["error"]["message"]
            except (ValueError, KeyError):
                msg = None
            check(st == want_st and msg, "%s: %d with a message (%s)" % (what, st, msg))
        st, _, _ = s.request("GET", "/v1/completions")
        check(st == 405, "GET /v1/completions: 405")
        st, _, _ = s.request("GET", "/nowhere")
        check(st == 404, "GET /nowhere: 404")
        # the gauges follow the serving loop's next pass, a moment after the last answer
        wait_for(lambda: s.metrics()["meshtrain_kv_blocks_used"] == 0, 30)
        m = s.metrics()
        done = m['meshtrain_requests_total{end="length"}'] + m['meshtrain_requests_total{end="stop"}']
        check(done == 11 and m["meshtrain_time_to_first_token_seconds_count"] == 11 and
              m["meshtrain_kv_blocks_used"] == 0 and
              m['meshtrain_requests_total{end="rejected"}'] == 0 and
              m["meshtrain_prefix_cache_hits_total"] > 0,
              "/metrics: 11 requests done, 11 TTFTs, no block used, prefix cache hits %d" %
              m["meshtrain_prefix_cache_hits_total"])
        st, _, _ = s.request("GET", "/health")
        check(st == 200, "still healthy after the bad requests")
    finally:
        s.stop()


def chat_prompt(messages):
    """The chat template (train/serve/chat.h): "ROLE: CONTENT\n" per message, then "assistant:"."""
    return "".join("%s: %s\n" % (m["role"], m["content"]) for m in messages) + "assistant:"


def answer(s, path, body):
    """(status, each choice's text by index, finish reasons, usage, the objects seen) of a
    completion or chat completion, whole or streamed (its chunks gathered)."""
    if not body.get("stream"):
        st, _, data = s.request("POST", path, body)
        j = json.loads(data)
        if st != 200:
            return st, j["error"]["message"], None, None, set()
        ch = sorted(j["choices"], key=lambda c: c["index"])
        texts = [c["message"]["content"] if "message" in c else c["text"] for c in ch]
        return st, texts, [c["finish_reason"] for c in ch], j["usage"], {j["object"]}
    c = s.conn()
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        return r.status, json.loads(r.read())["error"]["message"], None, None, set()
    texts, finish, usage, objects, roles = {}, {}, None, set(), {}
    for ev in sse_events(r):
        if ev == "[DONE]":
            break
        j = json.loads(ev)
        objects.add(j["object"])
        usage = j.get("usage") or usage
        for ch in j["choices"]:
            i = ch["index"]
            piece = ch["delta"] if "delta" in ch else {"content": ch["text"]}
            roles.setdefault(i, piece.get("role"))
            texts[i] = texts.get(i, "") + piece.get("content", "")
            finish[i] = ch["finish_reason"] or finish.get(i)
    c.close()
    if "chat.completion.chunk" in objects and any(roles[i] != "assistant" for i in roles):
        objects.add("a first delta without the assistant's role")
    n = len(texts)
    return 200, [texts[i] for i in range(n)], [finish[i] for i in range(n)], usage, objects


def scenario_chat(args):
    """POST /v1/chat/completions and n > 1, against generate and the server's own n = 1."""
    s = Server(args, "chat", [])
    try:
        msgs = [{"role": "system", "content": "Speak."}, {"role": "user", "content": "Who?"}]
        prompt = chat_prompt(msgs)
        want = generate(args, [prompt], 12, ["--temperature", "0"])[0]
        for stream in (False, True):
            st, texts, fin, usage, obj = answer(s, "/v1/chat/completions", {
                "messages": msgs, "max_tokens": 12, "temperature": 0, "stream": stream})
            kind = "chat.completion.chunk" if stream else "chat.completion"
            check(st == 200 and texts == [want] and fin == ["length"] and obj == {kind} and
                  usage["prompt_tokens"] == len(prompt) and usage["completion_tokens"] == 12,
                  "chat greedy (stream %s): generate's text on the template's prompt, %s" %
                  (stream, kind))
            if not stream:  # the server's first request
                book_price_check(s, args, 12, "chat greedy alone")
        samp = {"max_tokens": 10, "temperature": 0.9, "top_k": 30, "seed": 11}
        alone = [answer(s, "/v1/completions", dict(samp, prompt=PROMPTS[2], seed=11 + i))[1][0]
                 for i in range(3)]
        first = generate(args, [PROMPTS[2]], 10,
                         ["--temperature", "0.9", "--top-k", "30", "--seed", "11"])[0]
        check(alone[0] == first, "n = 1, seed 11: equals generate")
        for stream in (False, True):
            st, texts, fin, usage, _ = answer(s, "/v1/completions",
                                              dict(samp, prompt=PROMPTS[2], n=3, stream=stream))
            check(st == 200 and texts == alone and fin == ["length"] * 3 and
                  usage["completion_tokens"] == 30,
                  "n = 3 (stream %s): choice i is the request with seed 11 + i, usage 30" % stream)
        chat3 = [answer(s, "/v1/chat/completions", dict(samp, messages=msgs, seed=11 + i))[1][0]
                 for i in range(2)]
        st, texts, fin, _, obj = answer(s, "/v1/chat/completions",
                                        dict(samp, messages=msgs, n=2, stream=True))
        check(st == 200 and texts == chat3 and obj == {"chat.completion.chunk"},
              "chat n = 2 streamed: each choice's deltas (the first with the role) are the "
              "chat with seed 11 + i")
        bad = [("messages not an array", {"messages": "hi"}),
               ("no messages", {"messages": []}),
               ("an unknown role", {"messages": [{"role": "bot", "content": "x"}]}),
               ("content not a string", {"messages": [{"role": "user", "content": 3}]}),
               ("a prompt instead", {"prompt": "x", "messages": msgs}),
               ("n = 0", {"messages": msgs, "n": 0}),
               ("a prompt past the context", {"messages": [{"role": "user",
                                                            "content": "x" * 60}]})]
        for what, body in bad:
            st, msg, _, _, _ = answer(s, "/v1/chat/completions", body)
            check(st == 400 and msg, "chat, %s: 400 with a message (%s)" % (what, msg))
        wait_for(lambda: s.metrics()["meshtrain_kv_blocks_used"] == 0, 30)
        m = s.metrics()
        check(m['meshtrain_requests_total{end="length"}'] == 15 and
              m["meshtrain_kv_blocks_used"] == 0,
              "/metrics: each choice a request (15 ended by length), no block used")
    finally:
        s.stop()


def scenario_disconnect(args):
    s = Server(args, "disconnect", [], {"MESHTRAIN_SERVE_STEP_SLEEP": "0.05"})
    try:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        body = json.dumps({"prompt": "ROMEO:", "max_tokens": 55, "temperature": 0,
                           "stream": True}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while got.count(b"data: ") < 3:
            got += sock.recv(4096)
        check(wait_for(lambda: s.metrics()["meshtrain_kv_blocks_used"] > 0, 10),
              "a stream in flight holds KV blocks")
        sock.close()
        gone = wait_for(lambda: s.metrics()['meshtrain_requests_total{end="cancelled"}'] == 1)
        m = s.metrics()
        check(gone and m["meshtrain_kv_blocks_used"] == 0 and
              m["meshtrain_generation_tokens_total"] < 55,
              "the client left after 3 events: cancelled, %d of 55 tokens made, blocks back "
              "(used %d)" % (m["meshtrain_generation_tokens_total"], m["meshtrain_kv_blocks_used"]))
        st, text, fin, _ = s.complete({"prompt": "O", "max_tokens": 5, "temperature": 0})
        check(st == 200 and fin == "length", "the server answers the next request")
        held_tokens_stream(s)
    finally:
        s.stop()


def held_tokens_stream(s):
    """With continuous usage stats, tokens the text holds back still go out as chunks: an empty
    text, the usage counting them. Held here: the incomplete characters of the model's bytes, and
    each of up to 4 of its ASCII characters as the beginning of a stop string never completed,
    every step at least 50 ms. Before, no chunk went out until the text moved."""
    st, w, _, _ = s.complete({"prompt": "ROMEO:", "max_tokens": 30, "temperature": 0})
    stops = [ch + "\x01" for ch in dict.fromkeys(ch for ch in w if " " <= ch < "\x7f")][:4]
    c = s.conn()
    c.request("POST", "/v1/completions", body=json.dumps({
        "prompt": "ROMEO:", "max_tokens": 30, "temperature": 0, "stop": stops, "stream": True,
        "stream_options": {"continuous_usage_stats": True}}),
        headers={"Content-Type": "application/json"})
    text, seen = "", []  # (usage, the chunk's text, its finish_reason) of each chunk
    for ev in sse_events(c.getresponse()):
        if ev != "[DONE]":
            j = json.loads(ev)
            text += j["choices"][0]["text"]
            seen.append((j["usage"]["completion_tokens"], j["choices"][0]["text"],
                         j["choices"][0]["finish_reason"]))
    c.close()
    usage = [u for u, _, _ in seen]
    held = [k for k in range(1, len(seen))
            if seen[k][1] == "" and seen[k][2] is None and usage[k] > usage[k - 1]]
    check(st == 200 and "\x01" not in w and text == w and usage == sorted(usage) and
          usage[-1] == 30 and held,
          "held-back tokens stream as empty chunks whose usage counts them (chunks %s of %d)" %
          (held, len(seen)))


def run_clients(s, bodies, timeout=300):
    res = [None] * len(bodies)

    def one(i):
        try:
            res[i] = s.complete(bodies[i], timeout=timeout)
        except Exception as e:  # a hang or a reset is a failure the caller reports
            res[i] = (0, repr(e), None, {})
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 30)
    return res


def greedy_clients(s, n, want):
    """n clients at once, greedy, 30 tokens, every other one streaming, the prompts in turn:
    the indices of those whose text is not want[prompt] (or did not end by length)."""
    bodies = [{"prompt": PROMPTS[i % 8], "max_tokens": 30, "temperature": 0,
               "stream": i % 2 == 1} for i in range(n)]
    res = run_clients(s, bodies)
    return [i for i, r in enumerate(res)
            if r[0] != 200 or r[1] != want[bodies[i]["prompt"]] or r[2] != "length"]


def scenario_concurrent(args):
    want = dict(zip(PROMPTS, generate(args, PROMPTS, 30, ["--temperature", "0"])))
    s = Server(args, "concurrent", ["--max-seqs", "16", "--kv-block", "8", "--kv-blocks", "40",
                                    "--max-batch-tokens", "48", "--prefill-chunk", "16"])
    try:
        wrong = greedy_clients(s, 64, want)
        wait_for(lambda: s.metrics()["meshtrain_kv_blocks_used"] == 0, 30)
        m = s.metrics()
        check(not wrong, "64 concurrent clients (32 streams): every text equals generate alone "
              "(%d differ; %d preemptions, %d prefix-cache hits)" %
              (len(wrong), m["meshtrain_preemptions_total"], m["meshtrain_prefix_cache_hits_total"]))
        check(m["meshtrain_kv_blocks_used"] == 0 and m['meshtrain_requests_total{end="length"}'] == 64,
              "/metrics after: 64 done, no block used")
        check(m["meshtrain_kv_blocks_total"] == 40 * args.pools,
              "/metrics: %d KV blocks in all, --kv-blocks 40 x %d pools a replica" %
              (m["meshtrain_kv_blocks_total"], args.pools))
    finally:
        s.stop()


def drafter(args):
    """A 1-layer drafter: 2 training steps from the target's seed, saved beside the work dir."""
    return trained(args, "serve_http_draft.h5", MODEL[2:] + ["--layers", "1"])


def scenario_draft(args):
    want = dict(zip(PROMPTS, generate(args, PROMPTS, 30, ["--temperature", "0"])))
    s = Server(args, "draft", ["--draft", drafter(args), "--draft-tokens", "3", "--max-seqs", "8",
                               "--kv-block", "4", "--kv-blocks", "40", "--max-batch-tokens", "24",
                               "--prefill-chunk", "8"])
    try:
        wrong = greedy_clients(s, 16, want)
        st, _, data = s.request("POST", "/v1/completions",
                                {"prompt": PROMPTS[0], "max_tokens": 30, "temperature": 0})
        u = json.loads(data).get("usage", {}).get("speculative", {})
        check(st == 200 and u.get("drafted", 0) > 0 and
              u.get("accepted", -1) + u.get("rejected", -1) <= u["drafted"] and
              0 <= u.get("alpha", -1) <= 1,
              "usage.speculative of one request: %s" % u)
        st, text, fin, _ = s.complete({"prompt": PROMPTS[1], "max_tokens": 24, "temperature": 0.8,
                                       "top_k": 20, "seed": 5})
        check(st == 200 and fin == "length", "a sampled request (T 0.8, top-k 20) completes")
        wait_for(lambda: s.metrics()["meshtrain_kv_blocks_used"] == 0, 30)
        m = s.metrics()
        d, a = m["meshtrain_spec_draft_tokens_total"], m["meshtrain_spec_accepted_tokens_total"]
        check(not wrong, "16 concurrent greedy clients (8 streams) with a 1-layer drafter: every "
              "text equals plain generate (%d differ; %d preemptions)" %
              (len(wrong), m["meshtrain_preemptions_total"]))
        check(d > 0 and 0 < a < d and 0 < m["meshtrain_spec_alpha"] < 1 and
              m["meshtrain_kv_blocks_used"] == 0,
              "/metrics: %d drafted, %d accepted, alpha %.3f, no block used" %
              (d, a, m["meshtrain_spec_alpha"]))
    finally:
        s.stop()


def rank_pids(s):
    """{world rank: pid} of the server's ranks (mpirun's children)."""
    out = {}
    for d in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % d) as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != s.p.pid:
                    continue
            with open("/proc/%s/environ" % d, "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            out[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(d)
        except (OSError, ValueError, KeyError, IndexError):
            continue
    return out


def rank_pids_left(pids):
    return [p for p in pids.values() if alive(p)]


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


DISAGG = ["--max-seqs", "8", "--kv-block", "4", "--kv-blocks", "40", "--max-batch-tokens", "24",
          "--prefill-chunk", "8"]


def scenario_disagg(args):
    pre = int(args.mesh[args.mesh.index("--prefill-ranks") + 1])
    want = dict(zip(PROMPTS, generate(args, PROMPTS, 30, ["--temperature", "0"])))
    sampled = generate(args, [PROMPTS[1]], 24,
                       ["--temperature", "0.8", "--top-k", "20", "--seed", "5"])[0]
    s = Server(args, "disagg", DISAGG)
    try:
        wrong = greedy_clients(s, 16, want)
        st, text, _, _ = s.complete({"prompt": PROMPTS[1], "max_tokens": 24, "temperature": 0.8,
                                     "top_k": 20, "seed": 5})
        check(st == 200 and text == sampled, "sampled (T 0.8, top-k 20, seed 5) equals generate")
        wait_for(lambda: s.metrics()["meshtrain_kv_blocks_used"] == 0, 30)
        m = s.metrics()
        check(not wrong, "16 concurrent greedy clients (8 streams), prefill and decode on their "
              "own ranks: every text equals generate alone (%d differ; %d preemptions)" %
              (len(wrong), m["meshtrain_preemptions_total"]))
        check(m["meshtrain_kv_transfers_total"] >= 17 and m["meshtrain_kv_transfer_bytes_total"] > 0
              and m["meshtrain_kv_blocks_used"] == 0,
              "/metrics: %d requests' KV shipped, %d bytes, %.3f s" %
              (m["meshtrain_kv_transfers_total"], m["meshtrain_kv_transfer_bytes_total"],
               m["meshtrain_kv_transfer_seconds_total"]))
    finally:
        s.stop()
    for victim, side in ((pre - 1, "prefill"), (args.np - 1, "decode")):
        s = Server(args, "kill_" + side, DISAGG, {"MESHTRAIN_SERVE_STEP_SLEEP": "0.05"})
        pids = {}
        try:
            pids = rank_pids(s)
            res = []
            t = threading.Thread(target=lambda: res.extend(run_clients(s, [
                {"prompt": PROMPTS[i], "max_tokens": 55, "temperature": 0, "stream": i % 2 == 1}
                for i in range(6)], timeout=120)))
            t.start()
            busy = wait_for(lambda: s.metrics()["meshtrain_kv_blocks_used"] > 0, 60)
            os.kill(pids[victim], signal.SIGKILL)
            try:
                rc = s.p.wait(120)
            except subprocess.TimeoutExpired:
                rc = None
            t.join(150)
            wait_for(lambda: not any(alive(p) for p in pids.values()), 30)  # being reaped
            left = [r for r, p in pids.items() if alive(p)]
            check(busy and len(pids) == args.np and rc is not None and not t.is_alive() and
                  len(res) == 6 and not left,
                  "SIGKILL to %s rank %d with 6 requests running: mpirun ended (status %s), "
                  "the 6 clients returned (%d answered), ranks left: %s" %
                  (side, victim, rc, sum(r[0] == 200 for r in res), left))
        finally:
            s.stop()
            for p in rank_pids_left(pids):
                os.kill(p, signal.SIGKILL)  # a rank the job left behind must not outlive the test


def scenario_overload(args):
    want = generate(args, ["ROMEO:"], 20, ["--temperature", "0"])[0]
    s = Server(args, "overload", ["--max-queue", "2", "--max-seqs", "1"],
               {"MESHTRAIN_SERVE_STEP_SLEEP": "0.02"})
    try:
        res = run_clients(s, [{"prompt": "ROMEO:", "max_tokens": 20, "temperature": 0}] * 12)
        ok = [r for r in res if r[0] == 200]
        busy = [r for r in res if r[0] == 503]
        check(len(ok) + len(busy) == 12 and len(ok) >= 1 and len(busy) >= 1 and
              all(r[1] == want for r in ok) and all(r[3].get("Retry-After") for r in busy),
              "12 at once on --max-queue 2 --max-seqs 1: %d answered (all equal generate), %d "
              "got 503 with Retry-After, none hung" % (len(ok), len(busy)))
        m = s.metrics()
        check(m['meshtrain_requests_total{end="rejected"}'] == len(busy),
              "/metrics counts the %d rejected" % len(busy))
    finally:
        s.stop()
    queued_past_idle(args)


def queued_past_idle(args):
    """A stream queued for longer than the idle connections' timeout (1 s here, a test hook; 120
    s by default) still gets its answer: the connection of a request waiting for its first token
    is not idle. Before, it was closed when the first token came (an empty 200)."""
    s = Server(args, "idle", ["--max-seqs", "1"], {"MESHTRAIN_SERVE_STEP_SLEEP": "0.07",
                                                   "MESHTRAIN_SERVE_IDLE_TIMEOUT": "1"})
    try:
        res = [None, None]

        def one(i, body):
            try:
                res[i] = s.complete(dict(body, temperature=0, stream=True))
            except (OSError, http.client.HTTPException) as e:
                res[i] = (0, repr(e), None, {})
        first = threading.Thread(target=one, args=(0, {"prompt": "ROMEO:", "max_tokens": 40}))
        first.start()
        wait_for(lambda: s.metrics()["meshtrain_requests_running"] == 1, 30)
        one(1, {"prompt": "O", "max_tokens": 5})  # waits >= 40 steps of >= 70 ms
        first.join()
        check(res[0][0] == 200 and res[1][0] == 200 and res[1][2] == "length",
              "a stream queued for 2.8 s past a 1 s idle timeout is answered (%s)" % (res[1][:2],))
    finally:
        s.stop()


def sigterm_run(args, tag, to_mpirun):
    """8 requests (3 running, 5 queued), then SIGTERM; returns (results, hung, exit status, log)."""
    env = {"MESHTRAIN_SERVE_STEP_SLEEP": "0.15"}  # 50 tokens: at least 7.5 s
    if to_mpirun:  # SIGTERM to the ranks 5 s after mpirun's, SIGKILL 5 s later
        env["OMPI_MCA_odls_base_sigkill_timeout"] = "5"
    s = Server(args, tag, ["--max-seqs", "3", "--drain", "20"], env)
    try:
        bodies = [{"prompt": PROMPTS[i % 8][:10], "max_tokens": 50, "temperature": 0,
                   "stream": i % 2 == 0} for i in range(8)]
        res = [None] * 8

        def one(i):
            try:
                res[i] = s.complete(bodies[i], timeout=90)
            except Exception as e:
                res[i] = (0, repr(e), None, {})
        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        def state():
            m = s.metrics()
            return m["meshtrain_requests_running"] == 3 and m["meshtrain_requests_waiting"] == 5
        check(wait_for(state, 60), "3 requests running and 5 queued before the signal")
        t0 = time.time()
        if to_mpirun:
            os.kill(s.p.pid, signal.SIGTERM)
        else:
            pid = int(re.search(r"rank 0 is pid (\d+)", open(s.log).read()).group(1))
            os.kill(pid, signal.SIGTERM)
        for t in threads:
            t.join(100)
        hung = [i for i in range(8) if threads[i].is_alive() or res[i] is None]
        for i, r in enumerate(res):
            print("     request %d: %s" % (i, (r[0], r[2], r[1][:60]) if r else None))
        try:
            rc = s.p.wait(90)
        except subprocess.TimeoutExpired:
            rc = None
        return res, hung, rc, time.time() - t0, open(s.log).read()
    finally:
        s.stop()


def scenario_sigterm(args):
    """SIGTERM to rank 0: the 3 running requests finish, the 5 queued get 503, all ranks exit 0."""
    res, hung, rc, dt, log = sigterm_run(args, "sigterm", False)
    finished = [r for r in res if r and r[0] == 200 and r[2] == "length"]
    errors = [r for r in res if r and r[0] == 503]
    check(not hung and len(finished) == 3 and len(errors) == 5,
          "SIGTERM to rank 0 with 3 running and 5 queued: %d finished, %d got 503, %d hung" %
          (len(finished), len(errors), len(hung)))
    check(rc == 0 and "serve summary" in log,
          "every rank exited (status %s) %.1f s after the signal, rank 0 drained" % (rc, dt))


def scenario_sigterm_mpirun(args):
    """SIGTERM to mpirun (with odls_base_sigkill_timeout 5, the ranks get SIGTERM 5 s later and
    SIGKILL 5 s after that): every request ends with its text or an error, none hangs, every rank
    exits."""
    res, hung, rc, dt, log = sigterm_run(args, "sigterm_mpirun", True)
    finished = [r for r in res if r and r[0] == 200 and r[2] == "length"]
    errors = [r for r in res if r and r[0] == 503]
    check(not hung and len(finished) + len(errors) == 8 and len(errors) >= 5,
          "SIGTERM to mpirun, 3 running and 5 queued: %d finished, %d got an error (503 or an "
          "SSE error event), %d hung" % (len(finished), len(errors), len(hung)))
    check(rc is not None and "from the launcher" in log and "serve summary" in log,
          "every rank exited %.1f s after the signal (mpirun status %s) after draining" % (dt, rc))


def scenario_virtual_clock(args):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    load = [sys.executable, os.path.join(root, "bench", "serve_load.py")]
    corpus = os.path.join(root, "data", "tinyshakespeare.txt")
    shape = ["--layers", "8", "--d-model", "512", "--heads", "8", "--kv-heads", "4", "--d-ff",
             "1408", "--seq-len", "256"]
    w = {k: os.path.join(args.work, k + ".jsonl") for k in ("poisson", "shared")}
    for kind in w:
        subprocess.run(load + ["gen", kind, w[kind], "--corpus", corpus, "--n", "40", "--rate",
                               "40", "--seed", "3", "--context", "256", "--prefix", "96"],
                       check=True, capture_output=True)

    pads = {}  # each run's summary's rows of padding

    def sim(tag, work, extra):
        out = os.path.join(args.work, tag + ".out.jsonl")
        cmd = [args.mpiexec, "--oversubscribe", "--bind-to", "none", "-np", str(args.np),
               args.meshtrain, "serve"] + shape + args.mesh + extra + [
                   "--simulate", work, "--sim-out", out, "--sim-machine", "20,100"]
        done = subprocess.run(cmd, capture_output=True, env=mpi_env(), timeout=300, check=True,
                              text=True)
        pads[tag] = [int(x) for x in re.findall(r"\| ([0-9]+) rows of padding", done.stderr)]
        rs = [json.loads(l) for l in open(out)]
        return rs, open(out).read()
    cont, text1 = sim("cont", w["poisson"], ["--max-seqs", "8", "--batching", "continuous"])
    _, text2 = sim("cont2", w["poisson"], ["--max-seqs", "8", "--batching", "continuous"])
    stat, _ = sim("static", w["poisson"], ["--max-seqs", "8", "--batching", "static"])
    work = [json.loads(l) for l in open(w["poisson"])]
    ok = all(r["status"] == 200 and r["n_out"] == q["max_tokens"] and
             r["t_send"] <= r["t_first"] <= r["t_end"] and len(r["itl"]) == r["n_out"] - 1
             for r, q in zip(cont, work))
    check(ok and len(cont) == 40, "virtual clock: 40 requests each ran to max_tokens, times in "
          "order, one gap per token after the first")
    check(text1 == text2, "virtual clock: the same workload gives the same times")

    def span(rs):
        return max(r["t_end"] for r in rs) - min(r["t_send"] for r in rs)

    def mean_ttft(rs):
        return sum(r["t_first"] - r["t_send"] for r in rs) / len(rs)
    check(span(cont) < span(stat) and mean_ttft(cont) < mean_ttft(stat),
          "book's model, 40 req at 40/s: continuous batching %.3f s, mean TTFT %.1f ms; static "
          "batches %.3f s, %.1f ms" % (span(cont), 1e3 * mean_ttft(cont), span(stat),
                                      1e3 * mean_ttft(stat)))
    pad, _ = sim("padded", w["poisson"], ["--max-seqs", "8", "--batching", "static-padded"])
    check(span(stat) < span(pad) and all(r["n_out"] == q["max_tokens"] for r, q in zip(pad, work)),
          "book's model: padded static batches %.3f s (every row run to its batch's longest, "
          "each request its max_tokens and no more), static %.3f s" % (span(pad), span(stat)))
    check(pads["static"] == [0] and len(pads["padded"]) == 1 and pads["padded"][0] > 0,
          "the summary's rows of padding: static %s, static-padded %s" % (pads["static"],
                                                                         pads["padded"]))
    on, _ = sim("prefix_on", w["shared"], ["--prefix-cache", "on"])
    off, _ = sim("prefix_off", w["shared"], ["--prefix-cache", "off"])
    check(mean_ttft(on) < mean_ttft(off),
          "book's model, shared 96-token prefix: mean TTFT %.2f ms with the prefix cache, %.2f "
          "ms without" % (1e3 * mean_ttft(on), 1e3 * mean_ttft(off)))


def scenario_page(args):
    import html.parser
    import shutil
    import tempfile
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("SKIP page: no chromium (Debian's chromium package, .ci/setup)")
        sys.exit(77)
    s = Server(args, "page", [])
    try:
        st, hd, page = s.request("GET", "/")
        check(st == 200 and hd.get("Content-Type", "").startswith("text/html") and
              b"/v1/completions" in page, "GET /: the page (text/html)")
        _, want, _, _ = s.complete({"prompt": "ROMEO:", "max_tokens": 24, "temperature": 0})
        with tempfile.TemporaryDirectory(dir=args.work) as profile:
            cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                   "--no-first-run", "--disable-background-networking",
                   "--disable-component-update", "--disable-sync", "--user-data-dir=" + profile,
                   "--virtual-time-budget=60000", "--dump-dom",
                   "http://127.0.0.1:%d/?prompt=ROMEO:&max_tokens=24&temperature=0&top_k=0"
                   "&autorun=1" % s.port]
            dom = subprocess.run(cmd, capture_output=True, timeout=240).stdout.decode()

        class Grab(html.parser.HTMLParser):
            def __init__(self):
                super().__init__(convert_charrefs=True)
                self.at, self.out, self.status, self.done = None, "", "", None

            def handle_starttag(self, tag, attrs):
                a = dict(attrs)
                if tag == "body":
                    self.done = a.get("data-done")
                self.at = a.get("id") if a.get("id") in ("out", "status") else None

            def handle_endtag(self, tag):
                self.at = None

            def handle_data(self, d):
                if self.at == "out":
                    self.out += d
                elif self.at == "status":
                    self.status += d
        g = Grab()
        g.feed(dom)
        check(g.done == "1" and g.status.startswith("finished: length") and g.out == want,
              "headless Chromium: the page streamed %r (status %r), equal to the completion" %
              (g.out[:16], g.status[:40]))
    finally:
        s.stop()


def main():
    scen, args = sys.argv[1], script_args(sys.argv[2:])
    checkpoint(args)
    globals()["scenario_" + scen](args)
    print("serve_http %s: %d failure(s)" % (scen, len(FAILS)))
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
