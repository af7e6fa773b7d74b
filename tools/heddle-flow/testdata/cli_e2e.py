#!/usr/bin/python3
"""heddle-flow end to end: the binary on the checked-in topology and intents.

usage: cli_e2e.py HEDDLE_FLOW TESTDATA_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

flow, data = sys.argv[1], sys.argv[2]
topology = os.path.join(data, "wan4.yaml")


def run(*args, code=0):
    p = subprocess.run([flow, *args], capture_output=True, text=True, timeout=240)
    if p.returncode != code:
        sys.exit(f"heddle-flow {' '.join(args)}: exit {p.returncode}, wanted {code}\n"
                 f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p.stdout


with tempfile.TemporaryDirectory() as tmp:
    # compile -> file -> verify -> predict, all agreeing.
    sched = os.path.join(tmp, "ring.json")
    summary = json.loads(run("compile", "--topology", topology, "--builtin", "ring",
                             "--collective", "allreduce", "-o", sched, "-j"))
    assert summary["verified"] and summary["ranks"] == 4, summary
    with open(sched) as f:
        doc = json.load(f)  # the file is plain JSON for any reader
    assert doc["format"] == "heddle-schedule" and doc["format_version"] == 1, doc.keys()
    assert len(doc["per_rank"]) == 4 and doc["ranks"] == ["eu", "us", "asia", "sa"]
    assert sum(len(r["ops"]) for r in doc["per_rank"]) == summary["ops"]
    report = json.loads(run("verify", sched, "-j"))
    assert report["verified"] and report["digest"] == summary["schedule_digest"], report
    predicted = json.loads(run("predict", "--topology", topology, sched, "-j"))
    assert predicted["predicted_s"] == summary["predicted_s"], (predicted, summary)

    # A schedule edited by hand into a double reduce: verify says so, exit 1.
    for rank in doc["per_rank"]:
        for op in rank["ops"]:
            if op["op"] == "recv-reduce":
                rank["ops"].append(dict(op, deps=list(range(len(rank["ops"])))))
                break
        else:
            continue
        break
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        json.dump(doc, f)
    report = json.loads(run("verify", bad, "-j", code=1))
    assert not report["verified"] and report["problems"], report

    # check: diagnostics a generator can act on.
    diags = json.loads(run("check", "--intent", os.path.join(data, "broken.flow"), "--ranks",
                           "4", "--diagnostics", "json", code=1))
    assert diags and diags[0]["severity"] == "error" and diags[0]["line"] == 4, diags
    assert json.loads(run("check", "--intent", os.path.join(data, "ring_allgather.flow"),
                          "--ranks", "4", "--diagnostics", "json")) == []

    # builtins
    names = {b["name"] for b in json.loads(run("builtins", "-j"))}
    assert {"ring", "direct", "tree", "halving-doubling", "hierarchical"} <= names, names
    assert "collective allgather" in run("builtins", "--show", "ring", "--collective",
                                         "allgather")

    # synthesize: a proposer that always answers, and one that learns from its rejection.
    best = os.path.join(tmp, "best.json")
    out = json.loads(run("synthesize", "--topology", topology, "--collective", "allreduce",
                         "--budget", "30", "--rounds", "1", "-o", best, "-j", "--proposer",
                         f"{sys.executable} {os.path.join(data, 'good_proposer.py')}"))
    assert out["proposals"][0]["accepted"], out["proposals"]
    assert any(name == "proposal-1" for name in (t["name"] for t in out["tried"])), out["tried"]
    # The search keeps the best it compiled: no worse than the ring compiled on its own.
    ring = json.loads(run("compile", "--topology", topology, "--builtin", "ring",
                          "--collective", "allreduce", "-j"))
    assert out["predicted_s"] <= ring["predicted_s"], (out["predicted_s"], ring["predicted_s"])
    run("verify", best)
    out = json.loads(run("synthesize", "--topology", topology, "--collective", "allreduce",
                         "--budget", "30", "--rounds", "2", "-j", "--proposer",
                         f"{sys.executable} {os.path.join(data, 'learning_proposer.py')}"))
    first, second = out["proposals"]
    assert not first["accepted"] and first["diagnostics"], first
    assert second["accepted"], second

print("heddle-flow e2e: ok")
