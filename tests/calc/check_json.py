"""check_json.py plan|search [TOP]: parses meshplan --format json from stdin (json.load fails on
invalid JSON) and checks its shape: a plan object with the split sharding and its collectives,
or an array of TOP search candidates with at least one split tensor axis."""
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
else:
    top = int(sys.argv[2])
    assert isinstance(doc, list) and len(doc) == top, len(doc)
    assert [c["rank"] for c in doc] == list(range(1, top + 1))
    splits = [c for c in doc if any(a["role"] == "split" for a in c["spec"]["axes"])]
    assert splits, "no split candidate in the top %d" % top
    fits = [c["memory"]["fits"] for c in doc]
    assert fits == sorted(fits, reverse=True), fits
    print("ok: search JSON, %d candidates, %d with a split" % (len(doc), len(splits)))
