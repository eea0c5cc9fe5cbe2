#!/bin/bash
# Idle polling on two CPUs: one `uswap run` of the uniform workload per mode, with the
# machine's TLB-shootdown and rescheduling interrupts counted over the run
# (docs/benchmarks.md, `uswap run`, "Idle polling").
# Usage: bench/probes/idle.sh ROUNDS MODE...   (from the repository, after
#   cargo build --release -p uswap -p workload)
# Modes:
#   off, auto, on:US, ...   uswap run --idle-poll MODE
#   spin-same               --idle-poll off, plus a SCHED_IDLE busy loop pinned to each CPU,
#                           started in uswap run's session (its autogroup): truly idle
#   spin-setsid             the same loops each in a new session: in autogroups of their
#                           own they compete with the program like any process
# Environment: PATTERN (default uniform), SIZE (256M), BUDGET (64M); OTHER=1 also runs a
# busy loop (normal priority) pinned to CPU 1 in a session of its own, and prints the share
# of that CPU it kept: what the pollers took from another session's work.
set -u
bin=${BIN:-target/release}
rounds=$1
shift
irqs() { awk '/TLB:/ {t = $2 + $3} /RES:/ {r = $2 + $3} END {print t, r}' /proc/interrupts; }
spinners() {
    for cpu in 0 1; do
        if [ "$1" = setsid ]; then
            setsid chrt -i 0 taskset -c $cpu bash -c 'while :; do :; done' &
        else
            chrt -i 0 taskset -c $cpu bash -c 'while :; do :; done' &
        fi
    done
    sleep 0.3
}
for _ in $(seq "$rounds"); do
    for mode in "$@"; do
        poll=$mode
        case $mode in
            spin-same) poll=off; spinners same ;;
            spin-setsid) poll=off; spinners setsid ;;
        esac
        if [ "${OTHER:-0}" = 1 ]; then
            setsid taskset -c 1 bash -c 'while :; do :; done; # other' &
            sleep 0.3
            other=$(pgrep -f 'while :; do :; done; # other')
            other0=$(awk '{print $14 + $15}' /proc/$other/stat)
            start=$(date +%s.%N)
        fi
        read -r tlb0 res0 < <(irqs)
        out=$($bin/uswap run --budget "${BUDGET:-64M}" --idle-poll "$poll" -- \
            $bin/uswap-workload --size "${SIZE:-256M}" --pattern "${PATTERN:-uniform}" \
            --seed 1 --json 2>&1)
        read -r tlb1 res1 < <(irqs)
        share=-
        if [ "${OTHER:-0}" = 1 ]; then
            other1=$(awk '{print $14 + $15}' /proc/$other/stat)
            share=$(python3 -c "import time; print(round(($other1 - $other0) / 100 / \
                (time.time() - $start), 3))")
        fi
        pkill -f 'while :; do :; done'
        sleep 0.3
        echo "$out" | python3 -c "
import json, sys
spun = '-'
for line in sys.stdin:
    if line.startswith('{'):
        d = json.loads(line)
    if 'idle polling:' in line:
        spun = line.split('spun ')[1].split(' ')[0]
print('$mode', 'run_s', round(d['run_s'], 2), 'fault_p50_us', d['fault_p50_ns'] // 1000,
      'verify_errors', d['verify_errors'], 'tlb_ipis', $tlb1 - $tlb0,
      'resched_ipis', $res1 - $res0, 'pollers_spun_s', spun, 'other_cpu_share', '$share')
"
    done
done 2> >(grep -v Terminated >&2)
