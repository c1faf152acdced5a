#!/usr/bin/env python3
"""`meshtrain serve`'s logprobs over HTTP (serve_http.py's server and helpers).

usage: serve_logprobs.py MPIEXEC MESHTRAIN WORKDIR NP [mesh flags...]

Checks, on the mesh given:
  - /v1/completions with "logprobs": N, whole and streamed: one entry per generated token in
    tokens, token_logprobs, top_logprobs and text_offset (0, 1, ...); the tokens' bytes decode to
    the text; each top_logprobs holds the N most likely in decreasing order and the chosen token
    with its token_logprob; a greedy token is the most likely; the N alternatives' probabilities
    sum to at most 1; the streamed lists equal the whole answer's;
  - /v1/chat/completions with "logprobs": true, "top_logprobs": N, whole and streamed: content
    [{token, logprob, bytes, top_logprobs}] of the same values as the completion's;
  - the log-probabilities are the model's own distribution: the first token's alternatives are
    the same at temperature 0 and at 0.7 with top-k 5;
  - with n = 2 each choice has its own logprobs;
  - with --draft (speculative decoding, a 1-layer drafter): greedy texts and logprobs equal the
    plain server's (within 1e-4: the target scores the drafts in a forward of several rows);
  - bad values get 400: logprobs past 20 or negative or not an integer, a chat's logprobs not a
    boolean, top_logprobs past 20, negative, or without logprobs.
Exit 0 when every check passed, 1 otherwise.
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_http as sh  # noqa: E402

N_TOP = 5


def token_bytes(tok):
    """A token's text (a character below 0x80, or "bytes:\\xNN") as its byte."""
    if tok.startswith("bytes:\\x"):
        return bytes([int(tok[8:], 16)])
    return tok.encode()


def gather(s, path, body):
    """(status, choices: [{"text", "lp": [(token, logprob, [(alt, logprob)...])]}]) of a
    completion or chat completion, whole or streamed; the error message when not 200."""
    chat = "chat" in path
    choices, bad = {}, []

    def add(ch):
        c = choices.setdefault(ch["index"], {"text": "", "lp": []})
        piece = ch.get("delta") or ch.get("message") or {"content": ch.get("text", "")}
        c["text"] += piece.get("content") or ""
        lp = ch.get("logprobs")
        if lp is None:
            return
        if chat:
            for e in lp["content"]:
                if e["bytes"] != list(token_bytes(e["token"])):
                    bad.append("a chat token's bytes %s for %r" % (e["bytes"], e["token"]))
                c["lp"].append((e["token"], e["logprob"],
                                [(a["token"], a["logprob"]) for a in e["top_logprobs"]]))
            return
        base = len(c["lp"])
        if lp["text_offset"] != list(range(base, base + len(lp["tokens"]))):
            bad.append("text_offset %s from %d" % (lp["text_offset"], base))
        for t, v, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            c["lp"].append((t, v, list(top.items())))

    if not body.get("stream"):
        st, _, data = s.request("POST", path, body)
        j = json.loads(data)
        if st != 200:
            return st, j["error"]["message"]
        for ch in j["choices"]:
            add(ch)
    else:
        c = s.conn()
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return r.status, json.loads(r.read())["error"]["message"]
        for ev in sh.sse_events(r):
            if ev == "[DONE]":
                break
            for ch in json.loads(ev)["choices"]:
                add(ch)
        c.close()
    sh.check(not bad, "%s%s: chat bytes and text offsets (%s)" %
             (path, " streamed" if body.get("stream") else "", "; ".join(bad[:3]) or "right"))
    return 200, [choices[i] for i in sorted(choices)]


def check_choice(c, n_top, ntok, greedy, chat, what):
    """The logprobs of one choice against its text and each other."""
    lp = c["lp"]
    text = b"".join(token_bytes(t) for t, _, _ in lp).decode("utf-8", errors="replace")
    sh.check(len(lp) == ntok and text == c["text"],
             "%s: %d tokens (want %d), their bytes decode to the text" % (what, len(lp), ntok))
    ok_sorted = ok_chosen = ok_greedy = ok_sum = True
    for tok, v, alts in lp:
        top = alts[:n_top]
        vals = [a[1] for a in top]
        ok_sorted &= len(top) == n_top and vals == sorted(vals, reverse=True) and v <= 0
        d = dict(alts)
        ok_chosen &= d.get(tok, v) == v and (chat or tok in d)
        ok_greedy &= not greedy or n_top == 0 or top[0][0] == tok
        ok_sum &= sum(math.exp(x) for x in vals) <= 1 + 1e-5
    sh.check(ok_sorted and ok_chosen and ok_greedy and ok_sum,
             "%s: %d alternatives in decreasing order (%s), the chosen token's logprob among "
             "them (%s), greedy = the most likely (%s), probabilities sum <= 1 (%s)" %
             (what, n_top, ok_sorted, ok_chosen, ok_greedy, ok_sum))


def close(a, b, tol):
    """Two choices' logprobs: the same tokens and alternatives, values within tol."""
    if len(a["lp"]) != len(b["lp"]):
        return False
    for (t1, v1, x1), (t2, v2, x2) in zip(a["lp"], b["lp"]):
        if t1 != t2 or abs(v1 - v2) > tol or [k for k, _ in x1] != [k for k, _ in x2]:
            return False
        if any(abs(p - q) > tol for (_, p), (_, q) in zip(x1, x2)):
            return False
    return True


def run_checks(s, tag):
    """The completions' and chats' checks on server s; returns the greedy answers."""
    greedy = {"prompt": sh.PROMPTS[0], "max_tokens": 12, "temperature": 0, "logprobs": N_TOP}
    got = {}
    for stream in (False, True):
        st, ch = gather(s, "/v1/completions", dict(greedy, stream=stream))
        if not sh.check(st == 200, "%s completion (stream %s): 200" % (tag, stream)):
            return None
        check_choice(ch[0], N_TOP, 12, True, False, "%s completion, stream %s" % (tag, stream))
        got[stream] = ch[0]
    sh.check(close(got[False], got[True], 1e-6), "%s: streamed logprobs equal whole" % tag)
    msgs = [{"role": "user", "content": "Who?"}]
    chat = {"messages": msgs, "max_tokens": 10, "temperature": 0, "logprobs": True,
            "top_logprobs": 3}
    for stream in (False, True):
        st, ch = gather(s, "/v1/chat/completions", dict(chat, stream=stream))
        if sh.check(st == 200, "%s chat (stream %s): 200" % (tag, stream)):
            check_choice(ch[0], 3, 10, True, True, "%s chat, stream %s" % (tag, stream))
    # the reported distribution is the model's: temperature and top-k leave it alone
    st0, a = gather(s, "/v1/completions", dict(greedy, max_tokens=1))
    st1, b = gather(s, "/v1/completions",
                    dict(greedy, max_tokens=1, temperature=0.7, top_k=5, seed=3))
    sh.check(st0 == st1 == 200 and a[0]["lp"][0][2][:N_TOP] == b[0]["lp"][0][2][:N_TOP],
             "%s: the first token's alternatives at temperature 0 and at 0.7, top-k 5, are the "
             "same (the model's distribution)" % tag)
    st, ch = gather(s, "/v1/completions", {"prompt": sh.PROMPTS[1], "max_tokens": 8, "n": 2,
                                           "temperature": 0.9, "seed": 4, "logprobs": 2})
    if sh.check(st == 200 and len(ch) == 2, "%s: n = 2 with logprobs: 200" % tag):
        for i in range(2):
            check_choice(ch[i], 2, 8, False, False, "%s n = 2, choice %d" % (tag, i))
    return got[False]


def bad_requests(s):
    bad = [("/v1/completions", {"logprobs": 21}), ("/v1/completions", {"logprobs": -1}),
           ("/v1/completions", {"logprobs": "5"}), ("/v1/completions", {"logprobs": True}),
           ("/v1/chat/completions", {"logprobs": 3}),
           ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}),
           ("/v1/chat/completions", {"logprobs": True, "top_logprobs": -1}),
           ("/v1/chat/completions", {"top_logprobs": 2})]
    for path, extra in bad:
        body = dict({"max_tokens": 4}, **extra)
        if "chat" in path:
            body["messages"] = [{"role": "user", "content": "x"}]
        else:
            body["prompt"] = "x"
        st, msg = gather(s, path, body)
        sh.check(st == 400 and "logprobs" in msg, "%s %s: 400 (%s)" % (path, extra, msg))


def main():
    args = sh.script_args(sys.argv[1:])
    sh.checkpoint(args)
    s = sh.Server(args, "logprobs", ["--kv-block", "4", "--prefill-chunk", "5"])
    try:
        plain = run_checks(s, "plain")
        bad_requests(s)
    finally:
        s.stop()
    s = sh.Server(args, "logprobs_draft", ["--draft", sh.drafter(args), "--draft-tokens", "3",
                                           "--kv-block", "4"])
    try:
        spec = run_checks(s, "draft")
        sh.check(plain is not None and spec is not None and close(plain, spec, 1e-4),
                 "speculative decoding: the greedy completion's tokens and logprobs equal the "
                 "plain server's within 1e-4")
    finally:
        s.stop()
    print("serve_logprobs: %d failure(s)" % len(sh.FAILS))
    sys.exit(1 if sh.FAILS else 0)


if __name__ == "__main__":
    main()
