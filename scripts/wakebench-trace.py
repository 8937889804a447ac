#!/usr/bin/env python3
"""wakebench-trace.py: where the slow cheap connections of a corral-wakebench
--trace file waited.

usage: scripts/wakebench-trace.py TRACE.csv [--slow MS]

For each run (mode, mechanism, workers) it counts the cheap connections
whose connect() to first read took longer than --slow ms (default 2) and
sorts each into one cause, from the timings of the connections and of the
heavy jobs on the same worker:

  busy <1ms    steered to a worker that had been in a heavy job for less
               than 1 ms when the client connected (it still looked free)
  busy >=1ms   steered to a worker that had been in a heavy job for 1 ms
               or more
  queued       waiting in the worker's socket queue when its worker began
               a heavy job (the job began after the connect, before the
               accept)
  batch        accepted before or during a heavy job's start, read after
               it (taken in the same wakeup or loop iteration)
  late accept  none of these, and most of the wait was before the accept
               (the worker was not in a heavy job: the machine was late)
  late read    none of these, and most of the wait was after the accept
"""
import csv
import sys
from collections import defaultdict


def main():
    args = sys.argv[1:]
    slow_ms = 2.0
    if "--slow" in args:
        i = args.index("--slow")
        slow_ms = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    runs = defaultdict(list)
    for row in csv.DictReader(open(args[0])):
        key = (int(row["run"]), row["mode"], row["mechanism"], int(row["workers"]))
        runs[key].append(row)
    causes = ["busy <1ms", "busy >=1ms", "queued", "batch", "late accept", "late read"]
    print(f"cheap connections slower than {slow_ms} ms from connect() to first read, by cause")
    print(f"{'run':>3} {'workers':>7} {'mode':<10} {'mechanism':<9} {'cheap':>6} {'slow':>5} "
          + " ".join(f"{c:>11}" for c in causes))
    for key in sorted(runs):
        rows = runs[key]
        heavy = defaultdict(list)
        for r in rows:
            if r["heavy"] == "1":
                heavy[r["worker"]].append((float(r["read_us"]), float(r["answer_us"])))
        count = dict.fromkeys(causes, 0)
        cheap = slow = 0
        for r in rows:
            if r["heavy"] == "1":
                continue
            cheap += 1
            c, a, rd = float(r["connect_us"]), float(r["accept_us"]), float(r["read_us"])
            if rd - c <= slow_ms * 1000:
                continue
            slow += 1
            jobs = heavy[r["worker"]]
            cause = "late accept" if a - c > rd - a else "late read"
            for start, end in jobs:
                if start <= c < end:
                    cause = "busy <1ms" if c - start < 1000 else "busy >=1ms"
                    break
            else:
                for start, end in jobs:
                    if c < start < rd and start < a:
                        cause = "queued"
                        break
                    if a <= start < rd:
                        cause = "batch"
                        break
            count[cause] += 1
        run, mode, mech, workers = key
        print(f"{run:>3} {workers:>7} {mode:<10} {mech:<9} {cheap:>6} {slow:>5} "
              + " ".join(f"{count[c]:>11}" for c in causes))


if __name__ == "__main__":
    main()
