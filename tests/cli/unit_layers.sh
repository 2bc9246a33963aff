#!/usr/bin/env bash
# The layer rule is enforced by the build (docs/architecture.md): base (src/base) <- kernels <- io <- engine (src).
# With each layer's real compile command (compile_commands.json), a probe file in that layer that includes a
# header of a higher layer (or of a sibling) does not compile, and one that includes a header it may use does;
# base and kernels cannot even see <mpi.h>. No quoted include climbs out of its directory ("../"), so the include
# paths are the only way between layers.
set -uo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
cc_json=$BUILD/compile_commands.json
[ -f "$cc_json" ] || { echo "FAIL: no $cc_json (CMAKE_EXPORT_COMPILE_COMMANDS)"; exit 1; }
bad=$(grep -rn '#include "\.\./' "$SRC/src" "$SRC/io" "$SRC/kernels" "$SRC/tests" --include='*.c' --include='*.h' \
  --include='*.cu' --include='*.cuh' || true)
fails=0
[ -z "$bad" ] || { echo "FAIL: includes that climb out of their directory:"; echo "$bad"; fails=1; }
python3 - "$cc_json" "$SRC" "$WORK" <<'PY' || fails=1
import json, os, shlex, subprocess, sys
cc, src, work = sys.argv[1:4]
cmds = {os.path.relpath(e["file"], src): e for e in json.load(open(cc))}
# layer: (a file of it, headers it may include, headers it must not see)
layers = {
    "base":    ("src/base/util.c", ["util.h", "dtype.h", "model_config.h"],
                ["ops.h", "h5io.h", "tokenizer.h", "deck.h", "run.h", "mpi.h"]),
    "kernels": ("kernels/cpu/norm_cpu.c", ["util.h", "dtype.h", "ops.h"],
                ["h5io.h", "dataset.h", "tokenizer.h", "deck.h", "zero.h", "mpi.h"]),
    "io":      ("io/safetensors.c", ["util.h", "model_config.h", "h5io.h", "tokenizer.h", "mpi.h"],
                ["ops.h", "deck.h", "model.h", "run.h", "comm.h"]),
    "engine":  ("src/deck.c", ["util.h", "ops.h", "h5io.h", "tokenizer.h", "deck.h", "run.h", "mpi.h"], []),
}
bad = 0
for name, (f, ok, no) in layers.items():
    e = cmds.get(f)
    if not e:
        print(f"FAIL: {f} is not in compile_commands.json"); bad += 1; continue
    args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    # the same command (include paths, definitions), compiling a probe instead of the layer's file
    i = args.index("-o")
    base = [a for a in args[:i] + args[i + 2:] if a != "-c" and a != e["file"] and not a.endswith("/" + f)]
    for h in ok + no:
        probe = os.path.join(work, f"probe_{name}.c")
        with open(probe, "w") as p:
            p.write(f'#include {"<mpi.h>" if h == "mpi.h" else chr(34) + h + chr(34)}\nint qf_layer_probe;\n')
        r = subprocess.run(base + ["-fsyntax-only", probe], cwd=e["directory"], capture_output=True, text=True)
        want = h in ok
        if (r.returncode == 0) != want:
            bad += 1
            print(f"FAIL: {name} including {h}: {'compiles' if r.returncode == 0 else 'fails'}, expected "
                  f"{'to compile' if want else 'to fail'}\n{r.stderr[:400]}")
    print(f"{name}: may include {', '.join(ok)}; cannot see {', '.join(no) or '-'}")
sys.exit(1 if bad else 0)
PY
[ "$fails" -eq 0 ] && echo "unit_layers: all checks passed" || { echo "unit_layers: FAIL"; exit 1; }
