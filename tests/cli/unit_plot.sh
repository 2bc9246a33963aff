#!/usr/bin/env bash
# qwen-ft plot: a valid PNG (signature, IHDR, CRCs, zlib stream of filtered RGB rows, curves in the palette's
# colours) and a well-formed SVG from metrics.jsonl lines like a resumed run writes (a repeated step range, null
# for a non-finite value, eval lines); valid_loss is drawn as points over the loss panel; every panel shares one x
# axis (a step is at the same x everywhere); two files overlay with a legend inside the plot area; bad input exits
# 2 naming file:line.
set -euo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
python3 - <<'PY'
import json, math
with open("m.jsonl", "w") as f:
    for s in list(range(1, 41)) + list(range(31, 61)):   # resumed from step 30 after a crash at 40
        o = {"step": s, "loss": 5 * math.exp(-s / 20) + 0.5, "lr": 1e-4 * min(1, s / 10), "grad_norm": 1 + 0.1 * (s % 7),
             "tokens": 1000, "tokens_per_s": 12345.6, "mfu": 0.41, "skipped": False}
        if s == 17: o["grad_norm"] = None                  # non-finite: JSON null
        f.write(json.dumps(o) + "\n")
        if s % 20 == 0: f.write(json.dumps({"step": s, "valid_loss": 4 * math.exp(-s / 25) + 0.6, "valid_ppl": 3.0}) + "\n")
with open("n.jsonl", "w") as f:
    for s in range(1, 61):
        f.write(json.dumps({"step": s, "loss": 4 * math.exp(-s / 15) + 0.7, "lr": 5e-5, "grad_norm": 0.9}) + "\n\n")
PY
"$QWENFT" plot m.jsonl -o c.png > png.out || fail "plot -> png"
grep -q "3 panels: loss+valid_loss lr grad_norm" png.out || fail "panels: $(cat png.out)"
"$QWENFT" plot m.jsonl n.jsonl -o c.svg --keys loss,lr,valid_loss,tokens_per_s > svg.out || fail "plot -> svg"
"$QWENFT" plot m.jsonl n.jsonl -o c2.png > /dev/null || fail "plot two files -> png"
python3 - c.png 3 c2.png 3 <<'PY' || fail "PNG check"
import struct, sys, zlib
for path, panels in zip(sys.argv[1::2], sys.argv[2::2]):
    b = open(path, "rb").read()
    assert b[:8] == b"\x89PNG\r\n\x1a\n", "signature"
    pos, chunks = 8, []
    while pos < len(b):
        n, = struct.unpack(">I", b[pos:pos + 4]); t = b[pos + 4:pos + 8]; d = b[pos + 8:pos + 8 + n]
        crc, = struct.unpack(">I", b[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(t + d) & 0xffffffff, f"CRC of {t}"
        chunks.append((t, d)); pos += 12 + n
    assert [t for t, _ in chunks][0] == b"IHDR" and chunks[-1][0] == b"IEND", [t for t, _ in chunks]
    w, h, depth, ctype, comp, filt, inter = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, ctype, comp, filt, inter) == (8, 2, 0, 0, 0), "IHDR fields"
    assert w == 960 and h == 34 + int(panels) * 250 + 10, (w, h)
    raw = zlib.decompress(b"".join(d for t, d in chunks if t == b"IDAT"))
    assert len(raw) == h * (1 + 3 * w), "pixel data size"
    rows = [raw[y * (1 + 3 * w):(y + 1) * (1 + 3 * w)] for y in range(h)]
    assert all(r[0] == 0 for r in rows), "filter bytes"
    px = b"".join(r[1:] for r in rows)
    blue = sum(1 for i in range(0, len(px), 3) if px[i:i + 3] == bytes((31, 119, 180)))
    orange = sum(1 for i in range(0, len(px), 3) if px[i:i + 3] == bytes((255, 127, 14)))
    white = sum(1 for i in range(0, len(px), 3) if px[i:i + 3] == b"\xff\xff\xff")
    assert blue > 2000 and white > 0.8 * w * h, (blue, white)
    print(f"{path}: PNG {w}x{h}, {len(b)} bytes, {blue} px of the first curve colour, {orange} of the second")
PY
if command -v xmllint > /dev/null; then xmllint --noout c.svg || fail "xmllint c.svg"; fi
python3 - c.svg <<'PY' || fail "SVG check"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
assert root.tag == ns + "svg"
lines = root.findall(f"{ns}polyline"); dots = root.findall(f"{ns}circle")
texts = [t.text for t in root.findall(f"{ns}text")]
for k in ("loss", "lr", "valid_loss", "tokens_per_s", "m.jsonl", "n.jsonl", "step"):
    assert k in texts, f"text {k!r} missing"
assert len(lines) == 5, f"{len(lines)} polylines (loss x2, lr x2, tokens_per_s x1)"
pts = lines[0].get("points").split()
assert len(pts) == 60, f"resumed series has {len(pts)} points, want 60 (steps 1..60 once)"
x_at = {s + 1: float(p.split(",")[0]) for s, p in enumerate(pts)}  # m.jsonl's loss: steps 1..60
# one x axis: tokens_per_s (its own panel) puts every step where loss does
tps = [float(p.split(",")[0]) for p in lines[4].get("points").split()]
assert tps == [x_at[s] for s in range(1, 61)], "tokens_per_s panel has another x axis than the loss panel"
# valid_loss over the loss panel, at its steps 20, 40, 60 (and one legend marker)
loss_top, loss_bottom = 34 + 44, 34 + 250 - 40
data = [d for d in dots if any(abs(float(d.get("cx")) - x_at[s]) < 0.05 for s in (20, 40, 60))]
assert len(data) == 3 and len(dots) == 4, f"{len(dots)} points, {len(data)} at steps 20/40/60"
assert all(loss_top <= float(d.get("cy")) <= loss_bottom for d in data), "valid_loss points outside the loss panel"
# each panel's legend lies inside its plot area and names the files with data there (tokens_per_s: m.jsonl only)
legend = [t for t in root.findall(f"{ns}text") if t.text in ("m.jsonl", "n.jsonl")]
inside = lambda t: 90 < float(t.get("x")) and float(t.get("x")) + 7 * len(t.text) < 930 and any(
    loss_top + 250 * i < float(t.get("y")) < loss_bottom + 250 * i for i in range(3))
assert len(legend) == 5 and all(inside(t) for t in legend), f"legend outside the frame: {[(t.text, t.get('x'), t.get('y')) for t in legend]}"
print(f"c.svg: well-formed; {len(lines)} curves on one x axis, 3 eval points over loss, resumed series {len(pts)} points")
PY
# bad input: exit 2, naming file:line
printf '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "loss": \n' > bad.jsonl
printf '{"step": 1, "loss": 2.0}\n{"loss": 1.5}\n' > nostep.jsonl
printf '{"step": 1, "loss": "high"}\n' > str.jsonl
expect2() { # expect2 PATTERN ARGS...: exit code 2 and PATTERN in the message
  local pat=$1 rc=0; shift
  "$QWENFT" plot "$@" > err.out 2>&1 || rc=$?
  if [ "$rc" -ne 2 ] || ! grep -q -- "$pat" err.out; then fail "plot $*: exit $rc: $(cat err.out)"; else echo "exit 2: $(cat err.out)"; fi
}
expect2 "bad.jsonl:3: not a JSON object" bad.jsonl -o x.png
expect2 "nostep.jsonl:2: key 'step'" nostep.jsonl -o x.png
expect2 "str.jsonl:1: key 'loss': not a number" str.jsonl -o x.svg
expect2 "missing.jsonl: cannot open" missing.jsonl -o x.png
expect2 "must end in .svg or .png" m.jsonl -o x.jpg
expect2 "none of the keys" m.jsonl -o x.png --keys nothing,here
expect2 "missing --out" m.jsonl
[ ! -e x.png ] && [ ! -e x.svg ] || fail "a failed plot left an output file"
[ "$fails" -eq 0 ] && echo "PASS" || { echo "FAIL: $fails"; exit 1; }
