#!/usr/bin/env python3
"""What another process's buffered writes do to the mirror's fsyncs: the applier's group commit, alone and beside a
writer like a Kafka broker on the same machine.

Why: in tools/bench/tail.sh and tools/bench/serve.sh the source broker (and MirrorMaker 2's target broker) write
their logs to the same filesystem as the mirror, and a Kafka broker never fsyncs: its pages are written back by the
kernel once they are dirty_expire_centisecs old (30 s by default). On ext4 (data=ordered), blocks allocated by that
writeback join the journal transaction that the mirror's next fsync commits, so that fsync waits for the broker's
data to reach the disk. This probe reproduces it without Kafka or segmirror.

Each scenario runs DURATION seconds (default 45: past the 30 s expiry). The "mirror" appends GROUP_KIB (default
300, about 30 ms of 10,000 records/s of 1 KiB) to a file and fsyncs it, every 30 ms, timing each fsync. The
"broker" appends 100 KiB every 10 ms (10 MiB/s, never fsynced) to its own file, in the mirror's directory or, for
the third scenario, in OTHER_DIR (another filesystem, such as /dev/shm: a broker on another machine).

Usage: tools/bench/fsync_contention.py MIRROR_DIR [OTHER_DIR]
Prints a table: per scenario, the fsyncs timed, p50 / p99 / max ms, and how many took over 50 ms.
"""
import os
import sys
import threading
import time

DURATION = float(os.environ.get("DURATION", "45"))
GROUP_KIB = int(os.environ.get("GROUP_KIB", "300"))


def broker(path, stop):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    buf = os.urandom(100 * 1024)
    due = time.monotonic()
    while not stop.is_set():
        os.write(fd, buf)
        due += 0.01
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    os.close(fd)
    os.unlink(path)


def scenario(mirror_dir, broker_dir):
    stop = threading.Event()
    writer = None
    if broker_dir is not None:
        writer = threading.Thread(target=broker, args=(os.path.join(broker_dir, "fsync-probe-broker.bin"), stop))
        writer.start()
    path = os.path.join(mirror_dir, "fsync-probe-mirror.bin")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    group = os.urandom(GROUP_KIB * 1024)
    times = []
    end = time.monotonic() + DURATION
    try:
        while time.monotonic() < end:
            os.write(fd, group)
            start = time.perf_counter()
            os.fsync(fd)
            times.append((time.perf_counter() - start) * 1000.0)
            time.sleep(0.03)
    finally:
        stop.set()
        if writer is not None:
            writer.join()
        os.close(fd)
        os.unlink(path)
    times.sort()
    n = len(times)
    return n, times[n // 2], times[min(n - 1, int(n * 0.99))], times[-1], sum(1 for t in times if t > 50)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    mirror_dir = sys.argv[1]
    other = sys.argv[2] if len(sys.argv) == 3 else None
    scenarios = [("mirror alone", None), ("beside a 10 MiB/s writer, same filesystem", mirror_dir)]
    if other is not None:
        scenarios.append(("beside a 10 MiB/s writer in " + other, other))
    print("fsync of %d KiB appends every 30 ms in %s, %.0f s per scenario" % (GROUP_KIB, mirror_dir, DURATION))
    print("reproduce: DURATION=%.0f GROUP_KIB=%d %s" % (DURATION, GROUP_KIB, " ".join(sys.argv)))
    print()
    print("| scenario | fsyncs | p50 ms | p99 ms | max ms | over 50 ms |")
    print("|---|---|---|---|---|---|")
    for name, broker_dir in scenarios:
        n, p50, p99, top, slow = scenario(mirror_dir, broker_dir)
        print("| %s | %d | %.1f | %.1f | %.1f | %d |" % (name, n, p50, p99, top, slow), flush=True)


if __name__ == "__main__":
    main()
