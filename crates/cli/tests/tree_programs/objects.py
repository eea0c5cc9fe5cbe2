# Builds N objects of 1000 bytes and prints their checksum (the tree tests' program).
#   objects.py N [depth [mode]]
# depth > 0: runs itself again with depth - 1 through subprocess after building, and
# checks its own objects once that child is done (a parent whose memory goes cold while
# its child works). mode "die": SIGKILLs itself once built (and a moment later). mode "pool": hashes in a
# multiprocessing pool of 2 workers, each building its own N objects.
import hashlib, os, signal, subprocess, sys

n = int(sys.argv[1])
depth = int(sys.argv[2]) if len(sys.argv) > 2 else 0
mode = sys.argv[3] if len(sys.argv) > 3 else ""


def say(*words):
    """Prints one line with one write: members print at once into one pipe, and with
    PYTHONUNBUFFERED set print() writes each word and separator on its own, so two
    members' lines interleaved mid-line."""
    sys.stdout.write(" ".join(str(w) for w in words) + "\n")
    sys.stdout.flush()


def build(seed):
    return [(str(i + seed) * 100).encode()[:1000] for i in range(n)]


def digest(data):
    h = hashlib.sha256()
    for b in data:
        h.update(b)
    return h.hexdigest()


def worker(seed):
    return digest(build(seed))


if mode == "pool":
    import multiprocessing
    with multiprocessing.get_context("fork").Pool(2) as pool:
        for line in pool.map(worker, [1, 2]):
            say("pool", line)
    sys.exit(0)
data = build(0)
if mode == "die":
    import time
    time.sleep(1.5)  # its pages out and its swap space reserved, its stats written
    os.kill(os.getpid(), signal.SIGKILL)
if depth > 0:
    subprocess.run([sys.executable, sys.argv[0], str(n), str(depth - 1)], check=True)
say(depth, digest(data), len(data))
