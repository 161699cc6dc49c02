#!/usr/bin/env python3
"""Probes of tools/bench/mm2.sh (MirrorMaker 2 side by side): a paced producer, two latency observers, two
catch-up waits. One file so the bench has one Python helper; each subcommand prints one line for the script.

  produce BOOTSTRAP TOPIC RATE SECONDS
      RATE records/s of 1 KiB for SECONDS (acks=all, linger.ms=0, no compression: every record leaves at its
      time). Each value starts with its send time (time.time() at produce(), ASCII, then a space) and is padded to
      1 KiB. Prints the number of records acknowledged.
  consume BOOTSTRAP TOPIC EXPECTED TIMEOUT_S
      Reads partition 0 of the topic from the beginning (MirrorMaker 2's target topic) until EXPECTED records arrived or
      TIMEOUT_S passed; latency of a record = receive time (when poll handed it over) - its send time.
  mirror LOG_FILE EXPECTED TIMEOUT_S
      Follows a mirror partition's .log (segmirror's side) polling its size every 1 ms, parsing every complete
      batch appended (magic 2, uncompressed: the producer above sends none) down to each record's value; latency of
      a record = when its batch was first seen complete in the file - its send time. Until EXPECTED records or
      TIMEOUT_S.
      Both print: records p50_ms p99_ms max_ms loop_ms (loop_ms: the mean poll period, the resolution).
  wait-ends SOURCE_BOOTSTRAP TARGET_BOOTSTRAP TOPIC TIMEOUT_S
      Sum of the source partitions' end offsets (the records to copy: the topic has no transactions), then polls the
      target's every 100 ms until the sum is reached or TIMEOUT_S passed (MirrorMaker 2 does not keep offsets, but
      copies each record once in a run without failures, so counts compare). Prints the time it stopped (epoch s),
      the source's count, the target's count then, and when the first record was seen on the target (epoch s: the
      end of MirrorMaker 2's start-up) or nan.
  wait-files SOURCE_LOG_DIR MIRROR_DIR TOPIC TIMEOUT_S STALL_S
      Sum of the source's .log sizes of the topic's partitions, then polls the mirror's every 2 ms until reached,
      TIMEOUT_S passed or the mirror did not grow for STALL_S. Prints the time reached (epoch s) or nan, the source's
      bytes and the mirror's.
"""
import glob
import os
import sys
import time

RECORD_BYTES = 1024
POLL_S = 0.001


def pct(values, q):
    if not values:
        return float("nan")
    return values[min(len(values) - 1, max(0, int(round(q * (len(values) - 1)))))]


def report(latencies, loops, started):
    lat = sorted(latencies)
    loop_ms = (time.monotonic() - started) * 1000.0 / max(loops, 1)
    print("%d %.1f %.1f %.1f %.2f" % (len(lat), pct(lat, 0.50), pct(lat, 0.99), lat[-1] if lat else float("nan"), loop_ms))


def sent_at(value):
    return float(value[: value.index(b" ")])


def produce(bootstrap, topic, rate, seconds):
    from confluent_kafka import Producer

    # PROBE_LINGER_MS (default 0: every record leaves at its send time): at 10,000 records/s on two CPUs, one
    # request per record makes the producer and the source broker the floor of every row.
    linger = int(os.environ.get("PROBE_LINGER_MS", "0"))
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger, "compression.type": "none",
                  "queue.buffering.max.messages": 1000000})
    acked = [0]

    def done(err, _msg):
        if err is None:
            acked[0] += 1

    total = rate * seconds
    pad = b"x" * RECORD_BYTES
    t0 = time.monotonic()
    for i in range(total):
        due = t0 + i / rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        stamp = b"%.6f " % time.time()
        p.produce(topic, stamp + pad[len(stamp):], on_delivery=done)
        p.poll(0)
    p.flush(60)
    print(acked[0])


def consume(bootstrap, topic, expected, timeout_s):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    # Assigned, not subscribed: a group join waits for the broker's group.initial.rebalance.delay.ms (3 s), which
    # would count as MirrorMaker 2's latency.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "mm2-bench", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    latencies = []
    loops = 0
    started = time.monotonic()
    while len(latencies) < expected and time.monotonic() - started < timeout_s:
        loops += 1
        # poll, not consume(num_messages): the latter waits for a full batch or its timeout.
        m = c.poll(0.05)
        if m is not None and m.error() is None:
            latencies.append((time.time() - sent_at(m.value())) * 1000.0)
    c.close()
    report(latencies, loops, started)


def varint(buf, pos):
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def batch_values(batch):
    """Values of the records of one uncompressed magic-2 batch (bytes from baseOffset on); none of a control batch."""
    attributes = int.from_bytes(batch[21:23], "big")
    if attributes & 0x07:
        raise SystemExit("a compressed batch in the mirror: the latency producer sends none")
    if attributes & 0x20:
        return []
    count = int.from_bytes(batch[57:61], "big")
    pos, values = 61, []
    for _ in range(count):
        length, pos = varint(batch, pos)
        end = pos + length
        pos += 1  # attributes
        _, pos = varint(batch, pos)  # timestamp delta
        _, pos = varint(batch, pos)  # offset delta
        key_len, pos = varint(batch, pos)
        pos += max(key_len, 0)
        value_len, pos = varint(batch, pos)
        values.append(bytes(batch[pos : pos + value_len]))
        pos = end
    return values


def mirror(path, expected, timeout_s):
    latencies = []
    loops = 0
    started = time.monotonic()
    pos = 0
    pending = b""
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
        if chunk:
            pending += chunk
            pos = 0
            while len(pending) - pos >= 12:
                size = 12 + int.from_bytes(pending[pos + 8 : pos + 12], "big")
                if len(pending) - pos < size:
                    break
                for v in batch_values(memoryview(pending)[pos : pos + size]):
                    latencies.append((now - sent_at(v)) * 1000.0)
                pos += size
            pending = pending[pos:]
        else:
            time.sleep(POLL_S)
    report(latencies, loops, started)


def end_offsets(consumer, topic):
    from confluent_kafka import TopicPartition

    md = consumer.list_topics(topic, timeout=5).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        return 0
    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1]
               for p in md.partitions)


def wait_ends(source, target, topic, timeout_s):
    from confluent_kafka import Consumer

    src = Consumer({"bootstrap.servers": source, "group.id": "mm2-bench-ends"})
    want = end_offsets(src, topic)
    src.close()
    tgt = Consumer({"bootstrap.servers": target, "group.id": "mm2-bench-ends"})
    started = time.monotonic()
    first = "nan"
    have = 0
    while True:
        try:
            have = end_offsets(tgt, topic)
        except Exception:  # the topic may not exist yet (MirrorMaker 2 creates it)
            pass
        if have > 0 and first == "nan":
            first = "%.6f" % time.time()
        if have >= want or time.monotonic() - started >= timeout_s:
            break
        time.sleep(0.1)
    print("%.6f %d %d %s" % (time.time(), want, have, first))


def log_bytes(root, topic):
    return sum(os.stat(f).st_size for f in glob.glob(os.path.join(root, glob.escape(topic) + "-*", "*.log")))


def wait_files(source, mirror_dir, topic, timeout_s, stall_s):
    want = log_bytes(source, topic)
    started = last_growth = time.monotonic()
    have = 0
    while time.monotonic() - started < timeout_s and time.monotonic() - last_growth < stall_s:
        now_have = log_bytes(mirror_dir, topic)
        if now_have >= want:
            print("%.6f %d %d" % (time.time(), want, now_have))
            return
        if now_have > have:
            have, last_growth = now_have, time.monotonic()
        # 20 ms: 0.1 % of a 15 s catch-up; a 2 ms poll took a tenth of a core from the two being measured.
        time.sleep(0.02)
    print("nan %d %d" % (want, have))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "produce":
        produce(args[0], args[1], int(args[2]), int(args[3]))
    elif cmd == "consume":
        consume(args[0], args[1], int(args[2]), float(args[3]))
    elif cmd == "mirror":
        mirror(args[0], int(args[1]), float(args[2]))
    elif cmd == "wait-ends":
        wait_ends(args[0], args[1], args[2], float(args[3]))
    elif cmd == "wait-files":
        wait_files(args[0], args[1], args[2], float(args[3]), float(args[4]))
    else:
        raise SystemExit("unknown subcommand " + cmd)


if __name__ == "__main__":
    main()
