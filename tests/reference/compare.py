#!/usr/bin/env python3
"""compare.py — compares a qwen-ft run with a golden.json made by make_goldens.py (stdlib only).

    compare.py golden.json metrics.jsonl eval_before.json eval_after.json [--rtol 2e-4] [--atol 1e-12]

metrics.jsonl: log.dir/metrics.jsonl of the run; lines with "step", "loss", "lr", "grad_norm" (other keys, and
lines without "loss" such as eval lines, are ignored). eval_before.json / eval_after.json: the output of
`qwen-ft eval`, one JSON line {"valid_loss":..,"valid_ppl":..,"tokens":..} (other lines are ignored).

Every golden step's loss, lr and grad_norm, and both valid losses, must agree within
|ours - golden| <= max(rtol * |golden|, atol) (atol covers lr == 0); valid token counts must be equal; valid_ppl
is checked with rtol x max(1, valid_loss) (exp turns an absolute loss error into a relative ppl error).
Prints a table; exit status 0 when everything agrees, 1 on any mismatch or missing step, 2 on unreadable input.
"""
import argparse
import json
import math
import sys


def die(msg):
    sys.stderr.write("compare.py: %s\n" % msg)
    sys.exit(2)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        die("%s: %s" % (path, e))


def read_metrics(path):
    steps = {}
    dups = []
    try:
        f = open(path)
    except OSError as e:
        die("%s: %s" % (path, e))
    with f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                die("%s:%d: not JSON (%s)" % (path, lineno, e))
            if not isinstance(rec, dict) or "loss" not in rec or "step" not in rec:
                continue
            st = int(rec["step"])
            if st in steps:
                dups.append(st)
            steps[st] = rec            # the last line of a step wins
    return steps, dups


def read_eval(path):
    """The last line of the file that is a JSON object with valid_loss."""
    found = None
    try:
        f = open(path)
    except OSError as e:
        die("%s: %s" % (path, e))
    with f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and "valid_loss" in rec:
                found = rec
    if found is None:
        die("%s: no JSON line with valid_loss" % path)
    return found


class Checker:
    def __init__(self, rtol, atol):
        self.rtol, self.atol = rtol, atol
        self.rows = []
        self.failures = 0

    def num(self, what, gold, ours, rtol=None):
        rtol = self.rtol if rtol is None else rtol
        if ours is None:
            self.rows.append((what, "%.9g" % float(gold), "MISSING", "", "FAIL"))
            self.failures += 1
            return
        try:
            o = float(ours)
        except (TypeError, ValueError):
            self.rows.append((what, "%.9g" % float(gold), repr(ours), "", "FAIL"))
            self.failures += 1
            return
        g = float(gold)
        diff = abs(o - g)
        ok = math.isfinite(o) and diff <= max(rtol * abs(g), self.atol)
        rel = diff / abs(g) if g != 0 else diff
        self.rows.append((what, "%.9g" % g, "%.9g" % o, "%.2e" % rel, "ok" if ok else "FAIL"))
        if not ok:
            self.failures += 1

    def exact(self, what, gold, ours):
        ok = ours is not None and ours == gold
        self.rows.append((what, str(gold), "MISSING" if ours is None else str(ours), "", "ok" if ok else "FAIL"))
        if not ok:
            self.failures += 1

    def table(self):
        head = ("quantity", "golden", "ours", "rel err", "")
        w = [max(len(r[i]) for r in self.rows + [head]) for i in range(5)]
        fmt = "%-*s  %*s  %*s  %*s  %s"
        print(fmt % (w[0], head[0], w[1], head[1], w[2], head[2], w[3], head[3], head[4]))
        for r in self.rows:
            print(fmt % (w[0], r[0], w[1], r[1], w[2], r[2], w[3], r[3], r[4]))


def main():
    ap = argparse.ArgumentParser(description="Compare a qwen-ft run with golden.json (make_goldens.py).")
    ap.add_argument("golden")
    ap.add_argument("metrics")
    ap.add_argument("eval_before")
    ap.add_argument("eval_after")
    ap.add_argument("--rtol", type=float, default=2e-4)
    ap.add_argument("--atol", type=float, default=1e-12, help="absolute tolerance floor (lr == 0)")
    a = ap.parse_args()

    golden = read_json(a.golden)
    steps, dups = read_metrics(a.metrics)
    ev_before = read_eval(a.eval_before)
    ev_after = read_eval(a.eval_after)

    ck = Checker(a.rtol, a.atol)

    def check_eval(tag, gold, ours):
        ck.num(tag + ".valid_loss", gold["valid_loss"], ours.get("valid_loss"))
        ppl_rtol = a.rtol * max(1.0, abs(gold["valid_loss"]))
        ck.num(tag + ".valid_ppl", gold["valid_ppl"], ours.get("valid_ppl"), rtol=ppl_rtol)
        ck.exact(tag + ".tokens", gold["tokens"], ours.get("tokens"))

    check_eval("valid_before", golden["valid_before"], ev_before)
    for gs in golden["steps"]:
        st = gs["step"]
        ours = steps.get(st)
        for key in ("loss", "lr", "grad_norm"):
            ck.num("step %d %s" % (st, key), gs[key], None if ours is None else ours.get(key))
    check_eval("valid_after", golden["valid_after"], ev_after)

    print("case %s: %s vs %s (rtol %g)" % (golden.get("case", "?"), a.golden, a.metrics, a.rtol))
    ck.table()
    extra = sorted(s for s in steps if s not in {g["step"] for g in golden["steps"]})
    if extra:
        print("note: steps not in the golden file (not compared): %s" % extra)
    if dups:
        print("note: steps logged more than once (last line used): %s" % sorted(set(dups)))
    if ck.failures:
        print("FAIL: %d mismatch(es)" % ck.failures)
        return 1
    print("OK: all %d quantities agree" % len(ck.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
