#!/usr/bin/env python3
"""Replays piece-search rules over the golden cases' candidate makespans.

Input: the file compiler_golden_test writes with HEDDLE_WRITE_PIECE_CURVES (a line per case,
"name kind ranks topology| P:makespan ..."; the candidates the current rule tries, each scheduled
to completion). Every rule below tries a prefix of those candidates, so the file is enough to
tell which piece count it would choose. For each rule: how many cases choose another piece count
than the current rule, the worst and the median change of their predicted time, and the
candidates it tries for the three cases that are slow to compile at 64 ranks
(docs/optiflow-compiler.md §7).

  python3 control/collective/testing/piece_search_rules.py curves.txt
"""
import statistics
import sys

GAIN = 0.02  # kMinPieceGain: a doubling is kept only if 2 % faster than the best so far
SLOW = [
    "halving-doubling allreduce 64 mesh",
    "tree allgather 64 mesh",
    "hierarchical allreduce 64 mesh",
]


def search(curve, stop_after_miss=None, model_lookahead=None):
    """The piece search over `curve` ([(P, makespan)] in order) with optional early stops.

    stop_after_miss(P, makespan, must_beat): after a doubling that is not kept, True stops the
      search (the current rule tries one more).
    model_lookahead k: after a kept doubling, fit T(P) = A + B/P through the last two kept
      candidates and stop unless the fit predicts T(k * P) below the next time to beat.
    Returns (chosen P, its makespan, the P tried).
    """
    best, best_s, prev, prev_s = None, float("inf"), None, None
    missed, tried = False, []
    for p, t in curve:
        must_beat = best_s * (1 - GAIN) if best is not None else float("inf")
        tried.append(p)
        if t < must_beat:
            prev, prev_s, best, best_s, missed = best, best_s, p, t, False
            if model_lookahead and prev is not None:
                b = (prev_s - best_s) / (1 / prev - 1 / best)
                predicted = best_s - b * (1 / best - 1 / (model_lookahead * best))
                if predicted >= best_s * (1 - GAIN):
                    break
        else:
            if missed:
                break  # the current rule: two doublings in a row not kept
            missed = True
            if stop_after_miss and stop_after_miss(p, t, must_beat):
                break
    return best, best_s, tried


def main():
    cases = {}
    for line in open(sys.argv[1]):
        key, _, rest = line.rstrip("\n").partition("|")
        cases[key] = [(int(x.split(":")[0]), float(x.split(":")[1])) for x in rest.split()]
    rules = [("current rule", {})]
    rules.append(("stop after one doubling not kept", {"stop_after_miss": lambda p, t, mb: True}))
    for d in (0.0025, 0.005, 0.01):
        rules.append((f"... unless it missed by < {d:.2%}",
                      {"stop_after_miss": lambda p, t, mb, d=d: t >= mb * (1 + d)}))
    for pmin in (16, 32):
        rules.append((f"stop after one not kept, P >= {pmin}",
                      {"stop_after_miss": lambda p, t, mb, pmin=pmin: p >= pmin}))
    for k in (2, 4, 8, 64):
        rules.append((f"A + B/P model, lookahead {k}x", {"model_lookahead": k}))
    rules.append(("model 4x + near miss 0.5%", {
        "model_lookahead": 4, "stop_after_miss": lambda p, t, mb: t >= mb * 1.005}))
    print(f"{len(cases)} cases")
    for name, kw in rules:
        changed = []
        for key, curve in cases.items():
            ob, os_, otried = search(curve)
            nb, ns, ntried = search(curve, **kw)
            assert ntried == otried[: len(ntried)], key
            if nb != ob:
                changed.append((ns / os_ - 1, key, ob, nb))
        changed.sort()
        worst = f"{changed[-1][0]:.2%} ({changed[-1][1]}: P {changed[-1][2]} -> {changed[-1][3]})" \
            if changed else "-"
        median = f"{statistics.median(c[0] for c in changed):.2%}" if changed else "-"
        slow = " ".join(str(len(search(cases[k], **kw)[2])) for k in SLOW if k in cases)
        print(f"{name:40s} changed {len(changed):4d}  median {median:>7s}  worst {worst}"
              f"  [tried in the slow three: {slow}]")


if __name__ == "__main__":
    main()
