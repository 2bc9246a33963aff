#!/usr/bin/env bash
# The layer rule is enforced by the build (docs/architecture.md): base (kernels/base) <- kernels | io <- the engine's
# folders (src/*/, each a library that sees only the folders it links) <- qwen-ft.
# 1. With each library's real compile command (compile_commands.json), a probe file in that library that includes
#    a header of a higher layer, of a sibling, or of an engine folder it does not build on does not compile, and one
#    that includes a header it may use does; base and kernels cannot even see <mpi.h>; prepare/ cannot see zero/.
#    (A probe lives outside the folders, so it names every engine header with its folder.)
# 2. No quoted include climbs out of its directory ("../"), so the include paths are the only way between layers.
# 3. No circle of files across modules: from the built objects (nm), file A -> file B when A uses a symbol B
#    defines; every strongly connected component of more than one file is a failure. Every call between folders
#    follows the libraries' declared links (build/qf_layers.txt), and docs/dependencies.txt, the picture of them in
#    docs/architecture.md, is that file.
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
# library: (a file of it, headers it may include, headers it must not see)
layers = {
    "base":     ("kernels/base/util.c", ["util.h", "dtype.h"],
                 ["model_config.h", "ops.h", "h5io.h", "tokenizer.h", "deck/deck.h", "train/run.h", "mpi.h"]),
    "kernels":  ("kernels/cpu/norm_cpu.c", ["util.h", "dtype.h", "ops.h"],
                 ["model_config.h", "h5io.h", "dataset.h", "tokenizer.h", "deck/deck.h", "zero/zero.h", "mpi.h"]),
    "io":       ("io/safetensors.c", ["util.h", "model_config.h", "h5io.h", "tokenizer.h", "mpi.h"],
                 ["ops.h", "deck/deck.h", "model/model.h", "train/run.h", "parallel/comm.h"]),
    "util":     ("src/util/json_out.c", ["util.h", "util/rng.h"],
                 ["ops.h", "h5io.h", "deck/deck.h", "parallel/comm.h", "model/model.h", "mpi.h"]),
    "deck":     ("src/deck/deck.c", ["util.h", "model_config.h", "deck/deck_keys.h", "deck/ds_config.h"],
                 ["ops.h", "util/json_out.h", "parallel/comm.h", "model/model.h", "zero/zero.h", "train/run.h"]),
    "parallel": ("src/parallel/comm.c", ["ops.h", "util/json_out.h", "parallel/topology.h", "mpi.h"],
                 ["h5io.h", "deck/deck.h", "model/model.h", "zero/zero.h", "train/run.h"]),
    "model":    ("src/model/model.c", ["ops.h", "h5io.h", "deck/deck.h", "util/rng.h", "model/backend.h"],
                 ["parallel/comm.h", "zero/zero.h", "store/checkpoint.h", "generate/decode.h", "train/run.h"]),
    "zero":     ("src/zero/zero.c", ["model/model.h", "parallel/comm.h", "zero/zero_impl.h"],
                 ["store/checkpoint.h", "prepare/prep.h", "generate/decode.h", "plan/estimate.h", "train/run.h"]),
    "store":    ("src/store/checkpoint.c", ["zero/zero.h", "h5io.h", "store/export_hf.h"],
                 ["prepare/prep.h", "generate/decode.h", "plan/estimate.h", "train/run.h", "cli/options.h"]),
    # the folder rule of the data side: prepare/ builds on io/ alone; it never calls the model or ZeRO
    "prepare":  ("src/prepare/prep_chat.c", ["tokenizer.h", "chatml.h", "dataset_pwrite.h", "mpi.h"],
                 ["ops.h", "deck/deck.h", "model/model.h", "zero/zero.h", "store/checkpoint.h", "train/run.h"]),
    "generate": ("src/generate/decode.c", ["model/model.h", "prepare/prep.h", "store/model_io.h"],
                 ["plan/estimate.h", "train/run.h", "cli/options.h"]),
    "plan":     ("src/plan/estimate.c", ["zero/zero.h", "generate/decode.h"], ["train/run.h", "cli/options.h"]),
    "train":    ("src/train/train.c", ["plan/estimate.h", "store/checkpoint.h", "train/run.h"],
                 ["cli/options.h", "cli/commands.h"]),
    "cli":      ("src/cli/cmd_train.c", ["train/train.h", "generate/decode.h", "prepare/prep.h", "cli/options.h"], []),
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
diff -u "$SRC/docs/dependencies.txt" "$BUILD/qf_layers.txt" ||
  { echo "FAIL: docs/dependencies.txt is not the build's qf_layers.txt (bash docs/dependencies.sh BUILD)"; fails=1; }
python3 - "$BUILD" <<'PY' || fails=1
import collections, glob, subprocess, sys
build = sys.argv[1]
objs = glob.glob(build + "/CMakeFiles/qf*.dir/**/*.o", recursive=True)
if len(objs) < 50:
    print(f"FAIL: only {len(objs)} objects under {build}/CMakeFiles/qf*.dir"); sys.exit(1)
name = lambda o: o.split(".dir/", 1)[1][:-2]
defs, uses = {}, collections.defaultdict(set)
for o in objs:
    for l in subprocess.run(["nm", o], capture_output=True, text=True).stdout.splitlines():
        p = l.split()
        if len(p) == 3 and p[1] in "TDRB": defs[p[2]] = name(o)
        elif len(p) == 2 and p[0] == "U": uses[name(o)].add(p[1])
g = {f: {defs[s] for s in us if s in defs and defs[s] != f} for f, us in uses.items()}
# Tarjan's strongly connected components, iteratively
index, low, stack, on, comps, counter = {}, {}, [], set(), [], 0
for root in list(g):
    if root in index: continue
    work = [(root, iter(g.get(root, ())))]
    index[root] = low[root] = counter; counter += 1; stack.append(root); on.add(root)
    while work:
        v, it = work[-1]
        w = next(it, None)
        if w is not None:
            if w not in index:
                index[w] = low[w] = counter; counter += 1; stack.append(w); on.add(w)
                work.append((w, iter(g.get(w, ()))))
            elif w in on: low[v] = min(low[v], index[w])
            continue
        work.pop()
        if work: low[work[-1][0]] = min(low[work[-1][0]], low[v])
        if low[v] == index[v]:
            c = []
            while True:
                x = stack.pop(); on.discard(x); c.append(x)
                if x == v: break
            if len(c) > 1: comps.append(sorted(c))
for c in comps: print("FAIL: files that call each other:", " <-> ".join(c))
print(f"circles: {len(comps)} among {len(objs)} objects")
# the libraries' declared links, closed transitively; a file's library from its folder
links = {}
for l in open(build + "/qf_layers.txt"):
    lib, _, deps = l.partition(":")
    links[lib.strip()] = deps.split()
def below(lib, seen=None):
    seen = set() if seen is None else seen
    for d in links.get(lib, ()):
        if d not in seen: seen.add(d); below(d, seen)
    return seen
def lib_of(f):
    parts = f.split("/")
    if parts[0] == "src": return "qf_" + parts[1]
    if parts[0] == "io": return "qf_io"
    return "qf_base" if parts[1] == "base" else "qf_kernels"
upward = sorted({(lib_of(a), lib_of(b), a, b) for a, bs in g.items() for b in bs
                 if lib_of(a) != lib_of(b) and lib_of(b) not in below(lib_of(a))})
for la, lb, a, b in upward: print(f"FAIL: {a} ({la}) calls {b} ({lb}), which {la} does not build on")
print(f"calls between libraries outside the declared links: {len(upward)}")
sys.exit(1 if comps or upward else 0)
PY
[ "$fails" -eq 0 ] && echo "unit_layers: all checks passed" || { echo "unit_layers: FAIL"; exit 1; }
