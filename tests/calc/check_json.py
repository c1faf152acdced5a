"""check_json.py plan|search [TOP]|infer|cp: parses meshplan --format json from stdin (json.load
fails on invalid JSON) and checks its shape: a plan object with the split sharding and its
collectives, an array of TOP search candidates with at least one split tensor axis, an
inference object with every key the calculator promises, consistent with one another, or a plan
with its context-parallel section (--cp y, --grad-bytes 4 over --act-bytes 2: dK, dV priced at
twice K, V's bytes)."""
import json
import sys

doc = json.load(sys.stdin)
if sys.argv[1] == "plan":
    sh = doc["spec"]["sharding"]
    assert sh["tensor"] == "z:4" and sh["data"] == "xyz/4", sh
    assert sh["X"] == 1024 and sh["Y"] == 4 and sh["M_X"] == 3 and sh["M_Y"] == 1, sh
    colls = doc["collectives"]
    assert colls and all(c["time"] > 0 and c["bytes"] > 0 for c in colls), colls
    step = doc["step"]
    assert 0 < step["t_math"] <= step["t_step_max"] <= step["t_step_sum"], step
    assert doc["memory"]["total"] > 0 and doc["notes"], doc["memory"]
    print("ok: plan JSON, %d collectives, step %.6g s" % (len(colls), step["t_step_max"]))
elif sys.argv[1] == "infer":
    inf = doc["inference"]
    keys = ["kv_bytes_per_token", "kv_bytes", "memory_per_chip", "fits", "min_chips", "prefill_s",
            "decode_step_s", "tokens_per_s", "tokens_per_s_per_chip", "b_crit", "tp_bound_flops",
            "tp_bound_hbm"]
    missing = [k for k in keys if k not in inf]
    assert not missing, missing
    assert all(inf[k] > 0 for k in keys if k != "fits"), inf
    assert inf["kv_bytes"] == inf["kv_bytes_per_token"] * doc["spec"]["context"] * doc["spec"]["batch"], inf
    tps = doc["spec"]["batch"] / inf["decode_step_s"]
    assert abs(inf["tokens_per_s"] - tps) <= 1e-9 * tps, (inf["tokens_per_s"], tps)
    assert inf["fits"] == (inf["memory_per_chip"] <= inf["hbm"]), inf
    print("ok: inference JSON, step %.6g s, %s-bound" % (inf["decode_step_s"], inf["regime"]))
elif sys.argv[1] == "cp":
    cp = doc["context_parallel"]
    assert cp["axis"] == "y" and cp["alg"] == "ring" and cp["C"] == 4, cp
    rows = {r["alg"]: r for r in cp["algorithms"]}
    assert sorted(rows) == ["allgather", "ring", "ulysses"], rows
    assert all(r["ok"] and r["sent_fwd"] > 0 and r["t_step"] >= doc["step"]["t_step_max"]
               for r in rows.values()), rows
    C, kv, ring = cp["C"], cp["kv_bytes"], rows["ring"]
    assert ring["calls_fwd0"] == C - 1 and ring["bytes_fwd0"] == kv, ring
    assert ring["bytes_bwd0"] == 3 * kv and ring["bytes_bwd1"] == 2 * kv, ring
    assert ring["sent_bwd"] == (C - 1) * kv + C * 2 * kv, ring
    assert cp["t_step"] == ring["t_step"], cp
    assert doc["memory"]["activations"] == cp["activations"], cp
    print("ok: plan JSON with --cp, ring step %.6g s" % cp["t_step"])
else:
    top = int(sys.argv[2])
    assert isinstance(doc, list) and len(doc) == top, len(doc)
    assert [c["rank"] for c in doc] == list(range(1, top + 1))
    splits = [c for c in doc if any(a["role"] == "split" for a in c["spec"]["axes"])]
    assert splits, "no split candidate in the top %d" % top
    fits = [c["memory"]["fits"] for c in doc]
    assert fits == sorted(fits, reverse=True), fits
    print("ok: search JSON, %d candidates, %d with a split" % (len(doc), len(splits)))
