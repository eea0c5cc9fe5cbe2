#!/bin/bash
# Where uswap's threads run on two CPUs: one `uswap run` of the workload per mode, with
# each thread's CPU set (and, for the idle modes, its policy) changed 150 ms in, by
# `taskset -p` and `chrt -i -p 0`; prints the access phase's time, the fault p50 and the
# program thread's migrations at 3 s (docs/benchmarks.md, "Probes").
# Usage: bench/probes/placement.sh [MODE...]   (from the repository, after
#   cargo build --release -p uswap -p workload)
# Modes (program / handler uswap-uffd / reclaimer uswap-kswapd / breaker uswap-cow):
#   free   nothing pinned            one    all four on CPU 0
#   split  kswapd on 1, rest on 0    apart  program and cow on 0, uffd and kswapd on 1
#   prog   program on 0, rest free   eng    uswap's three on 0, program free
#   idle   as eng, the three SCHED_IDLE     hidle  as eng, uffd and cow SCHED_IDLE
set -u
bin=${BIN:-target/release}
modes=${*:-free one split apart prog eng idle hidle}
for mode in $modes; do
    $bin/uswap run --budget 64M -- $bin/uswap-workload --size 256M --pattern uniform \
        --seed 1 --json >/tmp/placement.out 2>&1 &
    run=$!
    sleep 0.15
    w=$(pgrep -x uswap-workload | head -1)
    for t in /proc/$w/task/*; do
        tid=${t##*/}
        name=$(cat $t/comm)
        case $mode:$name in
            one:*|split:uswap-uffd|split:uswap-cow|split:uswap-workload) cpus=0 ;;
            split:uswap-kswapd|apart:uswap-uffd|apart:uswap-kswapd) cpus=1 ;;
            apart:*|prog:uswap-workload) cpus=0 ;;
            eng:uswap-uffd|eng:uswap-kswapd|eng:uswap-cow) cpus=0 ;;
            idle:uswap-uffd|idle:uswap-kswapd|idle:uswap-cow) cpus=0 ;;
            hidle:uswap-uffd|hidle:uswap-kswapd|hidle:uswap-cow) cpus=0 ;;
            *) cpus= ;;
        esac
        [ -n "$cpus" ] && taskset -pc $cpus $tid >/dev/null
        case $mode:$name in
            idle:uswap-uffd|idle:uswap-kswapd|idle:uswap-cow|hidle:uswap-uffd|hidle:uswap-cow)
                chrt -i -p 0 $tid ;;
        esac
    done
    sleep 2.85
    migrations=$(awk '/nr_migrations/ {print $3}' /proc/$w/task/$w/sched 2>/dev/null)
    wait $run
    python3 -c "
import json
for line in open('/tmp/placement.out'):
    if line.startswith('{'):
        d = json.loads(line)
        print('$mode', 'run_s', round(d['run_s'], 2), 'fault_p50_us', d['fault_p50_ns'] // 1000,
              'migrations_at_3s', '${migrations:-?}', 'verify_errors', d['verify_errors'])
"
done
