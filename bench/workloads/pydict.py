#!/usr/bin/env python3
"""A real program's heap under memory pressure: build a large dict, then walk it.

Used by `uswap bench compare` (workload `pydict`). The dict maps integers to short text
records, the shape of a cache or an index held by a Python service. Every value is
derived from its key, so the walk re-derives each one and counts mismatches: the run is
also a data-safety check. Prints one JSON line; exits 3 when any value differed.

    python3 pydict.py --size 1G [--seed 1] [--walks 1]
"""

import argparse
import json
import re
import sys
import time
import zlib

# Bytes of heap per entry, measured on CPython 3.11 (int key, ~60-char str value, dict
# slot, overallocation): the entry count is size / this.
BYTES_PER_ENTRY = 200
WORDS = ["swap", "page", "folio", "zram", "cgroup", "user", "session", "value",
         "index", "cache", "record", "memory", "request", "error", "count", "key"]
# 256 phrases of three words, so that building a value is one format, not a join.
PHRASES = [f"{WORDS[i & 15]} {WORDS[i >> 4]} {WORDS[(i * 7) & 15]}" for i in range(256)]


def parse_size(text):
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"bad size {text!r}")
    shift = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[match.group(2).lower()]
    return int(float(match.group(1)) * (1 << shift))


def value_of(key, seed):
    """The record stored under `key`: deterministic, text-like, about 60 characters."""
    h = (key * 0x9E3779B97F4A7C15 + seed) & 0xFFFFFFFFFFFFFFFF
    return f"{key:x}:{h:016x}:{PHRASES[h >> 56]} {PHRASES[(h >> 8) & 255]}"


def peak_rss_bytes():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("256M"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--walks", type=int, default=1)
    args = parser.parse_args()
    entries = max(1, args.size // BYTES_PER_ENTRY)

    start = time.monotonic()
    table = {}
    for key in range(entries):
        table[key] = value_of(key, args.seed)
    build_s = time.monotonic() - start

    walk_start = time.monotonic()
    errors = 0
    checksum = 0
    for _ in range(args.walks):
        checksum = 0
        for key, value in table.items():
            if value != value_of(key, args.seed):
                errors += 1
            checksum = zlib.crc32(value.encode(), checksum)
    walk_s = time.monotonic() - walk_start

    print(json.dumps({
        "workload": "pydict",
        "entries": entries,
        "size_bytes": args.size,
        "build_s": build_s,
        "walk_s": walk_s,
        "wall_s": time.monotonic() - start,
        "checksum": checksum,
        "verify_errors": errors,
        "peak_rss_bytes": peak_rss_bytes(),
    }))
    sys.exit(3 if errors else 0)


if __name__ == "__main__":
    main()
