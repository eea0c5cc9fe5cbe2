#!/bin/bash
# One `uswap run` of the 1 GiB workload under 256 MiB inside a v1 memory cgroup with no
# limit, to read what the kernel really holds for the run (the cgroup's charge) beside
# what `uswap bench compare` reports (the process tree's VmRSS, sampled every 50 ms).
# Root and cgroup v1 at /sys/fs/cgroup/memory. Usage: bench/probes/cgroup_run.sh BINDIR
# PATTERN, BINDIR holding uswap (the shim inside it) and uswap-workload (for example
# target/release). Prints one line: wall, cgroup peak, tree VmRSS peak, page cache charged.
# docs/benchmarks.md ("Probes").
set -eu
bin=$1
pattern=$2
group=/sys/fs/cgroup/memory/uswap-cgroup-run
[ -d /sys/fs/cgroup/memory ] || { echo "no cgroup v1 memory controller: skipped" >&2; exit 2; }
mkdir -p "$group"
echo 0 > "$group/memory.max_usage_in_bytes"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"; rmdir "$group" 2> /dev/null || true' EXIT
t0=$(date +%s.%N)
(
    echo $BASHPID > "$group/cgroup.procs"
    exec "$bin/uswap" run --budget 256M --zswap lz4 --swap-file "$scratch/swap" \
        --swap-size 1600M --pool-size 1600M -- \
        "$bin/uswap-workload" --size 1G --pattern "$pattern" --seed 1 > "$scratch/out" 2>&1
) &
pid=$!
peak=0
while kill -0 $pid 2> /dev/null; do
    sum=0
    for p in $(cat "$group/cgroup.procs" 2> /dev/null); do
        kib=$(awk '/^VmRSS/{print $2}' "/proc/$p/status" 2> /dev/null || true)
        sum=$((sum + ${kib:-0}))
    done
    [ $sum -gt $peak ] && peak=$sum
    sleep 0.05
done
wait $pid || { echo "the run failed:" >&2; cat "$scratch/out" >&2; exit 1; }
t1=$(date +%s.%N)
cache=$(awk '/^cache /{print $2}' "$group/memory.stat")
printf '%s %s: wall %.2f s, memory cgroup peak %d MiB, tree VmRSS peak %d MiB, page cache %d MiB\n' \
    "$bin" "$pattern" "$(echo "$t1 - $t0" | bc)" \
    $(($(cat "$group/memory.max_usage_in_bytes") >> 20)) $((peak / 1024)) $((cache >> 20))
