#!/usr/bin/env python3
"""trace_summary.py — what the GPU did, from a bench/kernel_trace.c CSV: per kernel, its calls and GPU time; the
time the GPU sat between kernels; and, with --step-kernel, the same per step of a repeated loop (a decoding step
ends with its last kernel, e.g. the argmax), so one step's timeline reads as: each kernel in launch order with its
mean duration and the mean gap before it (negative: it overlapped the kernel before, as a programmatic dependent
launch may).

  python3 bench/trace_summary.py trace.csv                          # whole run, per kernel
  python3 bench/trace_summary.py trace.csv --step-kernel argmax --skip 8 --steps 64
     # steps that end with a kernel whose name contains "argmax": skip the first 8, then 64 of them
  python3 bench/trace_summary.py trace.csv --last-ms 1500
     # only the activities that start in the trace's last 1.5 s (e.g. the last phase of a bench: a served burst)

Names are shortened from their mangled form (the identifier after _Z, template arguments dropped). Exits 2 on a
bad file or argument.
"""
import argparse
import csv
import re
import statistics
import sys


def die(msg):
    print(f"trace_summary: {msg}", file=sys.stderr)
    sys.exit(2)


def short(name):
    m = re.match(r"_Z(?:N\d*)?(\d+)", name)
    if m:  # _Z<len><ident>... or _ZN<len><ident>...
        n = int(m.group(1))
        start = m.end()
        return name[start:start + n]
    return name.split("(")[0][:60]


def load(path):
    rows = []
    try:
        with open(path, newline="") as f:
            r = csv.reader(f)
            head = next(r, None)
            if not head or head[0] != "kind":
                die(f"{path}: not a kernel_trace.c CSV (no header line)")
            for i, row in enumerate(r, start=2):
                if len(row) < 8:
                    die(f"{path}:{i}: {len(row)} fields, 8 expected")
                kind, s, e, stream, node, grid, block = row[:7]
                rows.append(dict(kind=kind, start=int(s), end=int(e), stream=int(stream), node=int(node),
                                 grid=int(grid), block=int(block), name=",".join(row[7:])))
    except OSError as ex:
        die(f"{path}: {ex.strerror}")
    except ValueError as ex:
        die(f"{path}: {ex}")
    rows.sort(key=lambda x: x["start"])
    return rows


def table(rows, title):
    """per name: calls, total, mean; the GPU's busy and idle time over the rows' span"""
    by = {}
    for x in rows:
        k = short(x["name"]) if x["kind"] == "K" else x["name"].split(" ")[0] + " " + x["name"].split(" ")[1]
        by.setdefault(k, []).append(x["end"] - x["start"])
    span = rows[-1]["end"] - rows[0]["start"] if rows else 0
    busy, last = 0, None  # union of the activities' intervals
    for x in rows:
        s, e = x["start"], x["end"]
        if last is None or s > last:
            busy += e - s
            last = e
        elif e > last:
            busy += e - last
            last = e
    print(f"{title}: {len(rows)} activities over {span / 1e6:.3f} ms; GPU busy {busy / 1e6:.3f} ms, "
          f"idle {(span - busy) / 1e6:.3f} ms")
    print(f"  {'kernel':44s} {'calls':>7s} {'total ms':>10s} {'mean us':>9s}")
    for k, d in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {k[:44]:44s} {len(d):7d} {sum(d) / 1e6:10.3f} {sum(d) / len(d) / 1e3:9.2f}")


def steps(rows, kernel, skip, count):
    """the loop's steps: each ends with an activity whose short name contains `kernel`"""
    ends = [i for i, x in enumerate(rows) if x["kind"] == "K" and kernel in short(x["name"])]
    if len(ends) < skip + 2:
        die(f"{len(ends)} steps end with a kernel named like '{kernel}': "
                 f"fewer than --skip {skip} + 2")
    ends = ends[skip:skip + count + 1]
    # (the activities after one step's last kernel up to the next one's; the gap before a step: its first
    # activity's start minus the previous step's last end)
    seqs = [(rows[a + 1:b + 1], rows[a + 1]["start"] - rows[a]["end"]) for a, b in zip(ends, ends[1:])]
    n = int(statistics.median(len(s) for s, _ in seqs))
    same = [s for s, _ in seqs if len(s) == n]  # steps of the usual shape (a step with more kernels is another kind)
    print(f"steps ending with '{kernel}': {len(seqs)} taken, {len(same)} of the usual {n} activities")
    durs = [s[-1]["end"] - s[0]["start"] for s in same]
    gaps = [g for s, g in seqs if len(s) == n]
    print(f"  step: median {statistics.median(durs) / 1e3:.1f} us from its first kernel's start to its last's end; "
          f"median gap before it {statistics.median(gaps) / 1e3:.1f} us (host work between steps)")
    # position by position: name, mean duration, mean gap before it (start minus the previous activity's end)
    pos = []
    for i in range(n):
        d = [s[i]["end"] - s[i]["start"] for s in same]
        g = [s[i]["start"] - s[i - 1]["end"] for s in same] if i else [0]
        pos.append((short(same[0][i]["name"]) if same[0][i]["kind"] == "K" else same[0][i]["name"],
                    statistics.mean(d), statistics.mean(g), same[0][i]["grid"], same[0][i]["block"]))
    # the repeated part (a layer) folded: positions summed per name, and per name and the kernel before it where
    # one kernel runs in several places of the layer (the one-row GEMV as o after the attention, as down after the
    # MLP, as the head)
    # (the kernel before a step's first one is the step's last: the steps repeat)
    prevs = {}
    for i, (name, *_rest) in enumerate(pos):
        prevs.setdefault(name, set()).add(pos[i - 1][0])
    by = {}
    for i, (name, d, g, grid, block) in enumerate(pos):
        key = f"{name} after {pos[i - 1][0]}" if len(prevs[name]) > 1 else name
        t = by.setdefault(key, [0, 0.0, 0.0, grid, block])
        t[0] += 1
        t[1] += d
        t[2] += g
    tot_d = sum(p[1] for p in pos)
    tot_g = sum(p[2] for p in pos)
    print(f"  per step: kernels {tot_d / 1e3:.1f} us, gaps between them {tot_g / 1e3:.1f} us "
          f"(negative: overlapped)")
    print(f"  {'kernel':60s} {'per step':>8s} {'mean us':>9s} {'gap us':>8s} {'step us':>9s} {'grid x block':>14s}")
    for name, (c, d, g, grid, block) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name[:60]:60s} {c:8d} {d / c / 1e3:9.2f} {g / c / 1e3:8.2f} {(d + g) / 1e3:9.1f} "
              f"{grid:>7d} x {block:<5d}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv")
    p.add_argument("--step-kernel", help="a step ends with a kernel whose short name contains this")
    p.add_argument("--skip", type=int, default=4, help="steps skipped first (default 4)")
    p.add_argument("--steps", type=int, default=1000000, help="steps taken after the skipped ones")
    p.add_argument("--last-ms", type=float, help="only the activities starting in the trace's last this many ms")
    a = p.parse_args()
    if a.skip < 0 or a.steps < 1 or (a.last_ms is not None and a.last_ms <= 0):
        p.error("--skip >= 0, --steps >= 1, --last-ms > 0")
    rows = load(a.csv)
    if not rows:
        die(f"{a.csv}: no activity")
    title = a.csv
    if a.last_ms is not None:
        end = max(x["end"] for x in rows)
        rows = [x for x in rows if x["start"] >= end - a.last_ms * 1e6]
        title = f"{a.csv}, its last {a.last_ms:g} ms"
    table(rows, title)
    if a.step_kernel:
        steps(rows, a.step_kernel, a.skip, a.steps)


if __name__ == "__main__":
    main()
