#!/usr/bin/env python3
"""A Python service with a cold part: build a large dict, then serve requests on a hot fifth.

Used by `uswap bench auto` (workload `pyservice`). The dict maps integers to short text
records, like pydict.py. The keys are cut into groups of GROUP consecutive keys (their
objects lie together in the heap, allocated one after another); every fifth group is hot,
and each request reads KEYS_PER_REQUEST records from hot groups drawn Zipf-like (the
group of rank r with probability about 1/r, ranks scattered over the hot groups), a key
uniform within its group. The other four fifths are built and never read again: the cold
part a memory controller may page out. Every value read is re-derived from its key and
compared, so the run is also a data-safety check.

The requests are served in this process, one after another, for --duration seconds
(a closed loop: the next request starts when the last one is answered), so the service's
measure is the requests served in that time and their latency. Prints one JSON line;
exits 3 when any value differed.

    python3 pyservice.py --size 1G [--duration 30] [--seed 1]
"""

import argparse
import json
import math
import random
import sys
import time
import zlib

# The records and sizes are pydict.py's, which the harness writes beside this script.
from pydict import BYTES_PER_ENTRY, parse_size, value_of

# Consecutive keys per group: 256 records are about 28 KiB of value strings, 8 KiB of
# key objects and 6 KiB of the dict's entries, several pages each.
GROUP = 256
# One group in HOT_EVERY is hot: a fifth of the data.
HOT_EVERY = 5
KEYS_PER_REQUEST = 8
# Latency histogram: 1 us buckets up to 100 ms, then one overflow bucket.
BUCKETS = 100_000


def coprime_step(n):
    """A step coprime with n, about 0.618 n: rank r goes to hot group (r * step) mod n."""
    step = max(1, int(n * 0.6180339887)) | 1
    while n > 1 and math.gcd(step, n) != 1:
        step += 2
    return step


def percentile(histogram, count, fraction):
    wanted = max(1, int(count * fraction + 0.5))
    seen = 0
    for micros, n in enumerate(histogram):
        seen += n
        if seen >= wanted:
            return micros * 1000
    return BUCKETS * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("256M"))
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    entries = max(GROUP * HOT_EVERY, args.size // BYTES_PER_ENTRY)
    groups = entries // GROUP
    hot_groups = groups // HOT_EVERY
    step = coprime_step(hot_groups)

    start = time.monotonic()
    table = {}
    for key in range(entries):
        table[key] = value_of(key, args.seed)
    build_s = time.monotonic() - start

    rng = random.Random(args.seed)
    draw = rng.random
    histogram = [0] * (BUCKETS + 1)
    errors = 0
    requests = 0
    checksum = 0
    serve_start_unix = time.time()
    serve_start = time.monotonic()
    deadline = serve_start + args.duration
    now = serve_start
    while now < deadline:
        response = []
        for _ in range(KEYS_PER_REQUEST):
            # Zipf(1)-like: rank = hot_groups ** u, for u uniform in [0, 1).
            rank = int(hot_groups ** draw()) - 1
            group = ((rank * step) % hot_groups) * HOT_EVERY
            key = group * GROUP + int(draw() * GROUP)
            value = table[key]
            if value != value_of(key, args.seed):
                errors += 1
            response.append(value)
        checksum = zlib.crc32("|".join(response).encode(), checksum)
        requests += 1
        end = time.monotonic()
        histogram[min(BUCKETS, int((end - now) * 1e6))] += 1
        now = end
    serve_s = now - serve_start

    print(json.dumps({
        "workload": "pyservice",
        "entries": entries,
        "hot_groups": hot_groups,
        "build_s": round(build_s, 3),
        "serve_s": round(serve_s, 3),
        "serve_start_unix": serve_start_unix,
        "requests": requests,
        "request_p50_ns": percentile(histogram, requests, 0.5),
        "request_p99_ns": percentile(histogram, requests, 0.99),
        "checksum": checksum,
        "verify_errors": errors,
    }))
    sys.stdout.flush()
    return 3 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
