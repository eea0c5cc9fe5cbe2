# `python3 examples/python_objects.py 1000000` builds a million bytes objects of 100 to 600
# bytes (the decimal digits of i, a hundred times over), 638 MiB at their peak, and prints a
# checksum over them (the `uswap run` demo and test).
import hashlib, sys
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
data = [(str(i) * 100).encode()[:1000] for i in range(n)]
h = hashlib.sha256()
for b in data:
    h.update(b)
print(h.hexdigest()[:16], len(data))
