#!/usr/bin/env bash
# Packaging, as a cluster admin meets it: `cmake --install` lays out bin/qwen-ft with a RUNPATH to the libraries
# it was linked against outside the system directories (it starts with an empty environment), the man page and
# the bash completion (both from the option tables), the LICENSE, and the modulefiles unless QWENFT_MODULEFILES
# is OFF; a configure against a parallel HDF5 laid out as Spack installs it (HDF5_ROOT=<prefix> with include/ and
# lib/, no pkg-config file, no wrapper) finds that HDF5 and no other.
set -uo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
p=$WORK/prefix
cmake --install "$BUILD" --prefix "$p" > install.log 2>&1 || { cat install.log; echo "FAIL: cmake --install"; exit 1; }

# 1. the binary, its RUNPATH, and that it runs with nothing in the environment
rp=$(readelf -d "$p/bin/qwen-ft" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
[ -n "$rp" ] || fail "bin/qwen-ft has no RUNPATH: $(readelf -d "$p/bin/qwen-ft" | grep -i path)"
for lib in $(ldd "$BUILD/qwen-ft" | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p'); do
  d=$(dirname "$lib")
  case "$d" in /lib | /lib64 | /usr/lib | /usr/lib64 | /lib/x86_64-linux-gnu | /usr/lib/x86_64-linux-gnu) continue ;; esac
  # a non-system library directory the linker used must be in the RUNPATH (libraries that come in through another
  # library's own dependencies are that library's business)
  if readelf -d "$BUILD/qwen-ft" | grep -q "NEEDED.*\[$(basename "$lib")\]"; then
    case ":$rp:" in *":$d:"*) ;; *) fail "$lib: $d is not in the RUNPATH '$rp'" ;; esac
  fi
done
env -i "$p/bin/qwen-ft" --version > v.txt 2>&1 || fail "qwen-ft --version with an empty environment: $(cat v.txt)"
echo "1. bin/qwen-ft: RUNPATH $rp; with env -i: $(head -n 1 v.txt)"

# 2. man page, completion, license
man=$p/share/man/man1/qwen-ft.1
[ -f "$man" ] && grep -q '^\.SS "qwen\\-ft prepare' "$man" || fail "no man page with the commands at $man"
if command -v man > /dev/null; then
  MANWIDTH=100 man -l "$man" 2> /dev/null | grep -q -- "--max-new-tokens" || fail "man -l $man lacks --max-new-tokens"
fi
comp=$p/share/bash-completion/completions/qwen-ft
"$QWENFT" --completion bash | cmp -s - "$comp" || fail "$comp is not qwen-ft --completion bash"
grep -q "^MIT License" "$p/share/qwen-ft/LICENSE" || fail "no LICENSE in share/qwen-ft"
echo "2. share/man/man1/qwen-ft.1, share/bash-completion/completions/qwen-ft, share/qwen-ft/LICENSE"

# 3. modulefiles follow QWENFT_MODULEFILES
mods=$(grep -c '^QWENFT_MODULEFILES:BOOL=ON' "$BUILD/CMakeCache.txt")
if [ "$mods" -eq 1 ]; then
  ls "$p"/share/modulefiles/qwen-ft/*.lua > /dev/null 2>&1 || fail "QWENFT_MODULEFILES=ON but no Lua modulefile"
else
  ! ls "$p"/share/modulefiles > /dev/null 2>&1 || fail "QWENFT_MODULEFILES=OFF but modulefiles were installed"
fi

# 4. a Spack-like parallel HDF5 under HDF5_ROOT (a copy of the one this build uses; configure only)
inc=$(sed -n 's/^QWENFT_HDF5_INCLUDE_DIR:INTERNAL=//p' "$BUILD/CMakeCache.txt")
lib=$(sed -n 's/^QWENFT_HDF5_LIBRARY:INTERNAL=//p' "$BUILD/CMakeCache.txt")
if [ -n "$inc" ] && [ -f "$lib" ]; then
  mkdir -p spack/include spack/lib
  cp -rL "$inc"/. spack/include/ && cp -L "$lib" spack/lib/libhdf5.so
  HDF5_ROOT=$WORK/spack cmake -S "$SRC" -B b -DQWENFT_CUDA=OFF -DBUILD_TESTING=OFF -DQWENFT_MODULEFILES=OFF \
    > configure.log 2>&1 || { cat configure.log; fail "configure with HDF5_ROOT=$WORK/spack"; }
  grep -q "parallel HDF5 from FindHDF5 .*: $WORK/spack/include" configure.log ||
    fail "HDF5_ROOT=$WORK/spack was not the HDF5 found: $(grep -i hdf5 configure.log)"
  grep -q "spack/lib/libhdf5.so" b/CMakeCache.txt || fail "the Spack-like libhdf5.so is not the one linked"
  echo "4. HDF5_ROOT=$WORK/spack: $(grep 'parallel HDF5 from' configure.log)"
else
  fail "the build does not record its HDF5 (QWENFT_HDF5_INCLUDE_DIR, QWENFT_HDF5_LIBRARY in CMakeCache.txt)"
fi

[ "$fails" -eq 0 ] && echo "unit_install: all checks passed" || { echo "unit_install: $fails failure(s)"; exit 1; }
