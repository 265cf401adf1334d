#!/usr/bin/env python3
"""A batch job whose work can be counted: SHA-256 over a 64 KiB block, for ever; every
100 ms (of its own running) it appends "UNIX_TIME BLOCKS_SO_FAR" to FILE, so the work done
in any window is the difference of two lines (a job stopped or starved writes nothing).

    batch_work.py FILE [--seconds S]   (S: stop after S seconds; default: until killed)

bench/ctl_step.py runs it as fp-ctl run's --batch job (IX's consolidation) and alone, on
one core, for its peak rate.
"""
import hashlib
import sys
import time


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    stop = float(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--seconds" else None
    block, n = bytes(65536), 0
    t0 = nxt = time.time()
    with open(sys.argv[1], "a", buffering=1) as out:
        out.write(f"{t0:.3f} 0\n")
        while stop is None or time.time() - t0 < stop:
            for _ in range(4):
                hashlib.sha256(block).digest()
            n += 4
            t = time.time()
            if t >= nxt:
                out.write(f"{t:.3f} {n}\n")
                nxt = t + 0.1


if __name__ == "__main__":
    main()
