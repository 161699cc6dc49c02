#!/usr/bin/env python3
"""Latency sampler of tools/bench/tail.sh: from a batch appended to the source segment to it on the mirror.

Polls the sizes of the source partition's active .log and of the mirror's copy of it, every POLL_S (1 ms). Each
time the source grew, (new size, time seen) is remembered; when the mirror's size first reaches that size, the
latency of that growth is the time between. Kafka appends whole batches, so each growth is one or more batches
(at high rates, several appends between two polls count as one growth, timed from when it was seen).

Resolution: the poll period (reported as the measured mean loop period, 1 ms plus stat calls plus scheduling on a
busy machine) on each side. "On the mirror" is the mirror file's size: the applier writes a chunk, fsyncs it, then
records and acknowledges it, so durable follows the size by one fsync (the fsync is part of the next chunk's wait,
not of this measurement).

Usage: tail_sampler.py SRC_LOG MIRROR_LOG STOP_FILE TIMEOUT_S
Stops when STOP_FILE exists and the mirror has caught up with the source's size then, or TIMEOUT_S after STOP_FILE
appeared (then exits 3: the mirror did not catch up). Prints one line:
  samples p50_ms p99_ms max_ms src_bytes first_growth_s last_growth_s mirror_done_s loop_ms
"""
import collections
import os
import sys
import time

POLL_S = 0.001


def size(path):
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def pct(sorted_values, q):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[i]


def main():
    src, mirror, stop_file, timeout_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    pending = collections.deque()
    latencies = []
    last_src = size(src)
    first_growth = last_growth = mirror_done = None
    stop_at = None
    loops = 0
    t0 = time.monotonic()
    wall0 = time.time()
    trace_path = os.environ.get("SAMPLER_TRACE")
    trace = open(trace_path, "w") if trace_path else None
    while True:
        now = time.monotonic()
        loops += 1
        s = size(src)
        if s > last_src:
            pending.append((s, now))
            last_src = s
            first_growth = first_growth if first_growth is not None else now
            last_growth = now
        m = size(mirror)
        while pending and pending[0][0] <= m:
            seen = pending.popleft()[1]
            latencies.append(now - seen)
            if trace is not None:
                trace.write("%.4f %.2f %d\n" % (seen - t0 + wall0, (now - seen) * 1000.0, m))
        if stop_at is None and os.path.exists(stop_file):
            stop_at = now
        if stop_at is not None:
            if not pending and m >= last_src:
                mirror_done = now
                break
            if now - stop_at > timeout_s:
                break
        time.sleep(POLL_S)
    loop_ms = (time.monotonic() - t0) * 1000.0 / max(loops, 1)
    lat = sorted(x * 1000.0 for x in latencies)
    base = first_growth if first_growth is not None else t0
    print(
        "%d %.1f %.1f %.1f %d %.3f %.3f %s %.2f"
        % (
            len(lat),
            pct(lat, 0.50),
            pct(lat, 0.99),
            lat[-1] if lat else float("nan"),
            last_src,
            0.0,
            (last_growth or base) - base,
            "%.3f" % (mirror_done - base) if mirror_done is not None else "nan",
            loop_ms,
        )
    )
    sys.exit(0 if mirror_done is not None else 3)


if __name__ == "__main__":
    main()
