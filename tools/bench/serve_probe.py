#!/usr/bin/env python3
"""Waits of tools/bench/serve.sh (segmirror serve against a stock broker). The latency probes themselves are
tools/bench/mm2_probe.py's (`produce`, `consume`): the same producer and the same consumer measure MirrorMaker 2's
target topic and the endpoint, so the two latencies differ only in what carries the records.

  wait-topic BOOTSTRAP TOPIC PARTITIONS RECORDS TIMEOUT_S
      Polls BOOTSTRAP (a broker or `segmirror serve`) every 200 ms until its metadata lists TOPIC with PARTITIONS
      partitions and the sum of their end offsets is at least RECORDS (0: the topic is enough), or TIMEOUT_S passed.
      Prints the seconds waited and the end offsets' sum seen last; exits 1 on the timeout.
  consume-from BOOTSTRAP TOPIC OFFSET EXPECTED TIMEOUT_S
      mm2_probe.py's `consume` (same client settings, same latency, same output line) from OFFSET of partition 0
      rather than from the beginning: the measurement leaves out the warm-up record written before it (so that the
      topic exists on the side measured and its path is running before the first timed record).
  mirror-from LOG_FILE SKIP EXPECTED TIMEOUT_S
      mm2_probe.py's `mirror` observer (the mirror's .log polled every 1 ms, a record's time = when its batch is
      first complete in the file) over the records after the first SKIP (the warm-up): latency TO THE MIRROR, the
      share of the end-to-end latency spent before serve. Same output line.
  perf-row FILE
      The result line of Kafka's ConsumerPerformance (its header names the columns, which moved between versions)
      as "mb mb_per_s records rebalance_ms fetch_ms fetch_mb_per_s", or "nan ..." when the tool printed none.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def wait_topic(bootstrap, topic, partitions, records, timeout_s):
    from confluent_kafka import Consumer

    from mm2_probe import end_offsets

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "serve-bench-wait", "enable.auto.commit": False})
    started = time.monotonic()
    have = -1
    try:
        while time.monotonic() - started < timeout_s:
            try:
                md = c.list_topics(topic, timeout=5).topics.get(topic)
                if md is not None and md.error is None and len(md.partitions) == partitions:
                    have = end_offsets(c, topic)
                    if have >= records:
                        print("%.1f %d" % (time.monotonic() - started, have))
                        return 0
            except Exception:  # not up yet, or the topic not known yet
                pass
            time.sleep(0.2)
    finally:
        c.close()
    print("%.1f %d" % (time.monotonic() - started, have))
    return 1


def consume_from(bootstrap, topic, offset, expected, timeout_s):
    from confluent_kafka import Consumer, TopicPartition

    from mm2_probe import report, sent_at

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "mm2-bench", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, offset)])
    latencies = []
    loops = 0
    started = time.monotonic()
    while len(latencies) < expected and time.monotonic() - started < timeout_s:
        loops += 1
        m = c.poll(0.05)
        if m is not None and m.error() is None:
            latencies.append((time.time() - sent_at(m.value())) * 1000.0)
    c.close()
    report(latencies, loops, started)
    return 0


def mirror_from(path, skip, expected, timeout_s):
    from mm2_probe import POLL_S, batch_values, report, sent_at

    latencies = []
    loops = 0
    started = time.monotonic()
    pending = b""
    seen = 0
    f = None
    while len(latencies) < expected and time.monotonic() - started < timeout_s:
        loops += 1
        if f is None:
            try:
                f = open(path, "rb")
            except FileNotFoundError:
                time.sleep(POLL_S)
                continue
        chunk = f.read()
        now = time.time()
        if not chunk:
            time.sleep(POLL_S)
            continue
        pending += chunk
        pos = 0
        while len(pending) - pos >= 12:
            size = 12 + int.from_bytes(pending[pos + 8 : pos + 12], "big")
            if len(pending) - pos < size:
                break
            for v in batch_values(memoryview(pending)[pos : pos + size]):
                seen += 1
                if seen > skip:
                    latencies.append((now - sent_at(v)) * 1000.0)
            pos += size
        pending = pending[pos:]
    report(latencies, loops, started)
    return 0


def perf_row(path):
    header = None
    with open(path, errors="replace") as f:
        for line in f:
            cells = [c.strip() for c in line.split(",")]
            if "data.consumed.in.MB" in cells:
                header = cells
            elif header is not None and len(cells) == len(header):
                row = dict(zip(header, cells))
                print(" ".join(row.get(k, "nan") for k in ("data.consumed.in.MB", "MB.sec", "data.consumed.in.nMsg",
                                                            "rebalance.time.ms", "fetch.time.ms", "fetch.MB.sec")))
                return 0
    print("nan nan 0 nan nan nan")
    return 1


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "wait-topic":
        return wait_topic(args[0], args[1], int(args[2]), int(args[3]), float(args[4]))
    if cmd == "consume-from":
        return consume_from(args[0], args[1], int(args[2]), int(args[3]), float(args[4]))
    if cmd == "mirror-from":
        return mirror_from(args[0], int(args[1]), int(args[2]), float(args[3]))
    if cmd == "perf-row":
        return perf_row(args[0])
    raise SystemExit("unknown subcommand " + cmd)


if __name__ == "__main__":
    sys.exit(main())
