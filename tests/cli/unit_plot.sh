#!/usr/bin/env bash
# qwen-ft plot: a valid PNG (signature, IHDR, CRCs, zlib stream of filtered RGB rows, curves in the palette's
# colours) and a well-formed SVG from metrics.jsonl lines like a resumed run writes (a repeated step range, null
# for a non-finite value, eval lines); two files overlay with a legend; bad input exits 2 naming file:line.
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
grep -q "4 panels: loss lr grad_norm valid_loss" png.out || fail "panels: $(cat png.out)"
"$QWENFT" plot m.jsonl n.jsonl -o c.svg --keys loss,lr,valid_loss,tokens_per_s > svg.out || fail "plot -> svg"
"$QWENFT" plot m.jsonl n.jsonl -o c2.png > /dev/null || fail "plot two files -> png"
python3 - c.png 4 c2.png 4 <<'PY' || fail "PNG check"
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
assert len(dots) == 3, f"{len(dots)} valid_loss points"
pts = lines[0].get("points").split()
assert len(pts) == 60, f"resumed series has {len(pts)} points, want 60 (steps 1..60 once)"
print(f"c.svg: well-formed; {len(lines)} curves, {len(dots)} eval points, resumed series {len(pts)} points")
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
