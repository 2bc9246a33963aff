#!/usr/bin/env bash
# docs/dependencies.sh BUILD_DIR — the picture of the libraries and what each builds on, from the build itself:
# BUILD_DIR/qf_layers.txt (written by CMake from the qf_engine_folder calls) becomes docs/dependencies.txt (which
# tests/cli/unit_layers.sh holds against the build) and, with Graphviz's dot, docs/dependencies.svg.
set -euo pipefail
build=${1:?usage: docs/dependencies.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
cp "$build/qf_layers.txt" "$here/dependencies.txt"
command -v dot >/dev/null || { echo "dependencies: wrote $here/dependencies.txt (no dot: no SVG)"; exit 0; }
{
  echo 'digraph qwenft { rankdir=BT; node [shape=box, fontname="Helvetica", fontsize=11]; edge [color="#555555"];'
  while IFS=: read -r lib deps; do
    case $lib in
      qf_base) label="kernels/base" ;; qf_kernels) label="kernels/" ;; qf_io) label="io/" ;;
      *) label="src/${lib#qf_}/" ;;
    esac
    echo "  $lib [label=\"$label\"];"
    for d in $deps; do echo "  $lib -> $d;"; done
  done < "$here/dependencies.txt"
  echo '}'
} | dot -Tsvg > "$here/dependencies.svg"
echo "dependencies: wrote $here/dependencies.txt and $here/dependencies.svg"
