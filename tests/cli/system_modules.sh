#!/usr/bin/env bash
# Modules, as a user meets them: after `cmake --install`, a real Lmod `module load qwen-ft` puts qwen-ft on PATH
# (`qwen-ft --version` works) and sets QWENFT_ROOT / QWENFT_SHARE; whatis and help answer; unload undoes it; Lmod
# also loads the Tcl modulefile (the one for Environment Modules sites). The build's module dependencies: a CMake
# configure under LOADEDMODULES=gcc/..:openmpi/..:cuda/..:hdf5/..:python/.. writes depends_on for MPI, CUDA and HDF5
# only, and `module load qwen-ft` then loads them (fake modules of those names stand in for a site's).
. "$SRC/tests/system_common.sh"
need_lmod
install_build
set +u
lmod
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
version=$(sed -n 's/^qwen-ft \([0-9.]*\)$/\1/p' < <("$QWENFT" --version))
lua=$WORK/prefix/share/modulefiles/qwen-ft/$version.lua
[ -f "$lua" ] || fail "no $lua"
[ -f "$WORK/prefix/share/modulefiles-tcl/qwen-ft/$version" ] || fail "no Tcl modulefile"

# 1. Lmod + the Lua modulefile
export MODULEPATH=$WORK/prefix/share/modulefiles
module load qwen-ft
[ "$(command -v qwen-ft)" = "$WORK/prefix/bin/qwen-ft" ] || fail "qwen-ft on PATH is '$(command -v qwen-ft)'"
[ "$(qwen-ft --version | head -n 1)" = "qwen-ft $version" ] || fail "qwen-ft --version says '$(qwen-ft --version)'"
[ "$QWENFT_ROOT" = "$WORK/prefix" ] || fail "QWENFT_ROOT=$QWENFT_ROOT"
for d in inputs/demo.cfg inputs/4090.cfg inputs/a100.cfg inputs/h200.cfg slurm/demo_cpu.sh slurm/qwen14b_8x4090.sh slurm/qwen-ft-job.sh docs/hpc.md; do
  [ -e "$QWENFT_SHARE/$d" ] || fail "\$QWENFT_SHARE/$d is missing"
done
module whatis qwen-ft 2>&1 | grep -q "Version: $version" || fail "module whatis"
module help qwen-ft 2>&1 | grep -q "srun --mpi=pmix qwen-ft train" || fail "module help"
echo "1. Lmod: module load qwen-ft -> $(command -v qwen-ft): $(qwen-ft --version | head -n 1); QWENFT_SHARE=$QWENFT_SHARE"
module unload qwen-ft
! command -v qwen-ft > /dev/null || fail "module unload left qwen-ft on PATH"

# 2. Lmod + the Tcl modulefile
export MODULEPATH=$WORK/prefix/share/modulefiles-tcl
module load qwen-ft
[ "$(qwen-ft --version 2> /dev/null | head -n 1)" = "qwen-ft $version" ] || fail "Tcl modulefile: qwen-ft --version"
echo "2. Lmod reading the Tcl modulefile: $(qwen-ft --version | head -n 1)"
module purge

# 3. depends_on from LOADEDMODULES at configure time
mkdir -p fake mini
for m in gcc/12.2.0 openmpi/4.1.4 cuda/12.4 hdf5/1.10.8-parallel python/3.11; do
  mkdir -p "fake/${m%/*}"
  printf 'setenv("FAKE_%s", "%s")\n' "$(echo "${m%/*}" | tr a-z A-Z)" "$m" > "fake/$m.lua"
done
ln -s "$SRC/modulefiles" mini/modulefiles
cat > mini/CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.24)
project(qwen-ft VERSION 9.8.7 LANGUAGES NONE)
include(GNUInstallDirs)
include(modulefiles/modulefiles.cmake)
CMAKE
LOADEDMODULES=gcc/12.2.0:openmpi/4.1.4:cuda/12.4:hdf5/1.10.8-parallel:python/3.11 cmake -S mini -B mini/build > mini.log 2>&1 ||
  { cat mini.log; fail "configure of the modulefiles under LOADEDMODULES"; }
cmake --install mini/build --prefix "$WORK/mprefix" >> mini.log 2>&1 || { cat mini.log; fail "install of the modulefiles"; }
deps=$(sed -n 's/^depends_on("\(.*\)")$/\1/p' "$WORK/mprefix/share/modulefiles/qwen-ft/9.8.7.lua" | tr '\n' ' ')
[ "$deps" = "openmpi/4.1.4 cuda/12.4 hdf5/1.10.8-parallel " ] || fail "depends_on lines: '$deps'"
export MODULEPATH=$WORK/fake:$WORK/mprefix/share/modulefiles
module load qwen-ft/9.8.7
for v in FAKE_OPENMPI FAKE_CUDA FAKE_HDF5; do [ -n "${!v:-}" ] || fail "module load qwen-ft did not load the module behind $v"; done
[ -z "${FAKE_GCC:-}" ] && [ -z "${FAKE_PYTHON:-}" ] || fail "gcc or python became a dependency"
echo "3. configured under $(grep -o 'depends on .*' mini.log); module load qwen-ft loaded: $LOADEDMODULES"
module purge
export MODULEPATH=$WORK/fake:$WORK/mprefix/share/modulefiles-tcl
module load qwen-ft/9.8.7
[ -n "${FAKE_OPENMPI:-}" ] && [ -n "${FAKE_HDF5:-}" ] || fail "the Tcl modulefile did not load its dependencies"
echo "4. the Tcl modulefile loads them too: $LOADEDMODULES"
[ "$fails" -eq 0 ] && echo "PASS" || { echo "FAIL: $fails"; exit 1; }
