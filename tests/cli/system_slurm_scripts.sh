#!/usr/bin/env bash
# Every shipped Slurm script (slurm/*.sh): shellcheck clean; `sbatch --test-only` accepts it on the test cluster,
# whose partitions are shaped like the scripts' targets (.ci/system-setup.sh: gpu4090 = 1 node of 8 GPUs, a100 =
# 1 node of 4, h200 = 4 nodes of 8, cpu). --test-only makes slurmctld parse the #SBATCH lines and check that the
# partition can ever satisfy them (nodes, tasks, CPUs per task, GPUs per node, memory, time, array, signal), without
# running anything; shown by asking for shapes the cluster lacks, which must be refused. And each script carries the
# conventions docs/hpc.md promises: srun --mpi=pmix, --gpus-per-node with --gpu-bind=none, one task per GPU,
# --signal=B:USR1@<lead> with --requeue and a trap that forwards the signal, module load qwen-ft.
. "$SRC/tests/system_common.sh"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
command -v shellcheck > /dev/null || skip "no shellcheck: run 'bash .ci/system-setup.sh' as root"
scripts=("$SRC"/slurm/*.sh)
[ ${#scripts[@]} -ge 6 ] || fail "expected at least 6 scripts in slurm/, found ${#scripts[@]}"
for s in "${scripts[@]}" "$SRC/.ci/system-setup.sh"; do
  shellcheck "$s" > sc.out 2>&1 || { fail "shellcheck $(basename "$s")"; cat sc.out; }
done
echo "shellcheck: ${#scripts[@]} slurm scripts and .ci/system-setup.sh clean"

# conventions (static)
for s in "${scripts[@]}"; do
  b=$(basename "$s")
  grep -q '^module load qwen-ft' "$s" || fail "$b: no 'module load qwen-ft'"
  grep -q 'srun --mpi=pmix' "$s" || fail "$b: no 'srun --mpi=pmix'"
  case "$b" in prepare.sh) continue ;; esac
  grep -q '^#SBATCH --signal=B:USR1@[0-9]' "$s" || fail "$b: no '#SBATCH --signal=B:USR1@<lead>'"
  grep -q '^#SBATCH --requeue' "$s" || fail "$b: no '#SBATCH --requeue'"
  grep -q "^trap 'forward USR1' USR1" "$s" || fail "$b: no trap forwarding SIGUSR1 to the step"
  grep -q 'scontrol requeue' "$s" || fail "$b: does not requeue itself"
  case "$b" in demo_cpu.sh) continue ;; esac
  tpn=$(sed -n 's/^#SBATCH --ntasks-per-node=\([0-9]*\).*/\1/p' "$s")
  gpn=$(sed -n 's/^#SBATCH --gpus-per-node=\([0-9]*\).*/\1/p' "$s")
  [ -n "$gpn" ] && [ "$tpn" = "$gpn" ] || fail "$b: not one task per GPU (ntasks-per-node $tpn, gpus-per-node $gpn)"
  grep -q -- "--gpus-per-node=$gpn --gpu-bind=none" "$s" || fail "$b: srun does not keep every GPU visible (--gpus-per-node=$gpn --gpu-bind=none)"
done

# sbatch --test-only: accepted as shipped (each names its partition) ...
need_slurm
# a cluster without several slurmd per machine (QWENFT_CI_MULTI_SLURMD=no) has one node per partition
h200_nodes=$(sinfo -h -p h200 -o %D 2> /dev/null | head -1)
for s in "${scripts[@]}"; do
  b=$(basename "$s")
  extra=()
  if [ "$b" = multinode.sh ] && [ "${h200_nodes:-0}" -lt 4 ]; then
    extra=(--nodes="$h200_nodes"); echo "note: partition h200 has $h200_nodes node(s); multinode.sh tried with --nodes=$h200_nodes"
  fi
  if sbatch --test-only "${extra[@]}" "$s" > t.out 2>&1 && grep -q "to start at" t.out; then
    echo "$b: $(sed -n 's/.*\(using .*\)/\1/p' t.out)"
  else
    fail "$b: sbatch --test-only"; cat t.out
  fi
done
# ... and refused where the shape does not exist (proving that --test-only checks it)
refuse() { if sbatch --test-only "$@" > t.out 2>&1; then fail "sbatch --test-only $* was accepted"; else echo "refused as it must be: $* ($(tail -1 t.out))"; fi; }
[ "$(sinfo -h -p a100 -o %G | head -1)" != gpu:4 ] || refuse -p a100 "$SRC/slurm/qwen14b_8x4090.sh"
refuse --nodes=$((h200_nodes + 1)) "$SRC/slurm/multinode.sh"
refuse --gpus-per-node=9 "$SRC/slurm/qwen14b_8x4090.sh"
[ "$fails" -eq 0 ] && echo "PASS" || { echo "FAIL: $fails"; exit 1; }
