#!/usr/bin/env python3
"""confluent-kafka clients of `segmirror serve` for the end-to-end tests (tests/tests/e2e_serve.rs).

kafka_client.py reads a topic to its end and exits; the endpoint tests also need clients that stay: a reader that
follows a partition while replication runs, a group member that is told when to commit and when to leave, and
clients that expect a refusal (a producer, a fetch out of range, an unknown topic) and report what they got.
Byte strings travel as standard base64, as in kafka_client.py. Every command reads one JSON request on stdin.

  serve_client.py follow     {"bootstrap", "topic", "isolation", "partitions": [..] | null}
      Assign mode from offset 0 of every partition (no group, nothing committed), printing one line per record as
      it arrives ({"partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers"}), and
      {"error": "..."} for a consume error, until SIGTERM (then exit 0).
  serve_client.py member     {"bootstrap", "topic", "group", "session_timeout_ms"}
      A subscribe-mode member of a classic group, until told to leave. Prints {"event": "assigned"|"revoked",
      "partitions": [..]} at each rebalance and {"event": "record", "partition", "offset"} per record. Reads
      commands on stdin after the request line, one JSON object a line:
        {"cmd": "commit", "offsets": [[partition, offset], ..]} -> {"event": "committed", "offsets": [..]}
        {"cmd": "close"}                                         -> {"event": "closed"}, exit 0
  serve_client.py committed  {"bootstrap", "topic", "group", "partitions": [..]}
      OffsetFetch of the group without joining it: {"offsets": [[partition, offset], ..]} (-1001: none).
  serve_client.py produce    {"bootstrap", "topic", "timeout_s"}
      One record with a plain (non-idempotent) producer: {"delivered": bool, "error_code": int, "error_name",
      "error_str", "retriable": bool, "elapsed_s": float}.
  serve_client.py lookups    {"bootstrap", "topic", "partitions": [..], "timestamps": [..]}
      ListOffsets (earliest and latest, read_uncommitted and read_committed; by each timestamp) and
      DescribeConfigs of the topic: {"watermarks": [[partition, isolation, low, high], ..],
      "times": [[partition, timestamp, offset], ..], "configs": {name: value}}.
  serve_client.py probe      {"bootstrap", "topic", "unknown_topic", "partition", "offset"}
      The metadata of an unknown topic and a fetch at an offset past the end (auto.offset.reset=error):
      {"unknown_topic": {"code", "name"} | null, "out_of_range": {"code", "name", "str"} | null}.
"""

import base64
import json
import queue
import signal
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME


def b64(data):
    return None if data is None else base64.b64encode(data).decode("ascii")


def ts_type_name(kind):
    if kind == TIMESTAMP_CREATE_TIME:
        return "CreateTime"
    if kind == TIMESTAMP_LOG_APPEND_TIME:
        return "LogAppendTime"
    return "NoTimestamp"


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def fail(message):
    sys.stderr.write(f"serve_client.py: {message}\n")
    sys.exit(1)


def partitions_of(consumer, topic, wanted, timeout=30):
    if wanted is not None:
        return list(wanted)
    deadline = time.monotonic() + timeout
    while True:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and meta.partitions:
            return sorted(meta.partitions.keys())
        if time.monotonic() > deadline:
            fail(f"no metadata for topic {topic!r}: {None if meta is None else meta.error}")
        time.sleep(0.2)


def follow(request):
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    topic = request["topic"]
    consumer = Consumer({
        "bootstrap.servers": request["bootstrap"],
        "group.id": "serve-follow-unused",  # required by the client; assign mode never joins it
        "enable.auto.commit": False,
        "isolation.level": request.get("isolation", "read_uncommitted"),
        "auto.offset.reset": "error",
    })
    parts = partitions_of(consumer, topic, request.get("partitions"))
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    while not stop.is_set():
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() != KafkaError._PARTITION_EOF:
                emit({"error": str(msg.error())})
            continue
        kind, ts = msg.timestamp()
        emit({"partition": msg.partition(), "offset": msg.offset(), "timestamp": ts,
              "timestamp_type": ts_type_name(kind), "key": b64(msg.key()), "value": b64(msg.value()),
              "headers": [[name, b64(value)] for name, value in (msg.headers() or [])]})
    consumer.close()


def member(request):
    topic = request["topic"]
    commands = queue.Queue()

    def read_commands():
        for line in sys.stdin:
            if line.strip():
                commands.put(json.loads(line))
        commands.put({"cmd": "close"})

    def on_assign(consumer, partitions):
        emit({"event": "assigned", "partitions": sorted(tp.partition for tp in partitions)})

    def on_revoke(consumer, partitions):
        emit({"event": "revoked", "partitions": sorted(tp.partition for tp in partitions)})

    consumer = Consumer({
        "bootstrap.servers": request["bootstrap"],
        "group.id": request["group"],
        "group.protocol": "classic",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": int(request.get("session_timeout_ms", 45000)),
    })
    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    threading.Thread(target=read_commands, daemon=True).start()
    while True:
        msg = consumer.poll(0.2)
        if msg is not None:
            if msg.error() is None:
                emit({"event": "record", "partition": msg.partition(), "offset": msg.offset()})
            elif msg.error().code() != KafkaError._PARTITION_EOF:
                emit({"event": "error", "error": str(msg.error())})
        try:
            command = commands.get_nowait()
        except queue.Empty:
            continue
        if command["cmd"] == "commit":
            offsets = [TopicPartition(topic, p, o) for p, o in command["offsets"]]
            try:
                done = consumer.commit(offsets=offsets, asynchronous=False)
                failed = [f"{tp.partition}: {tp.error}" for tp in done if tp.error is not None]
                if failed:
                    emit({"event": "error", "error": f"commit: {failed}"})
                else:
                    emit({"event": "committed", "offsets": [[tp.partition, tp.offset] for tp in done]})
            except KafkaException as e:
                emit({"event": "error", "error": f"commit: {e}"})
        elif command["cmd"] == "close":
            consumer.close()
            emit({"event": "closed"})
            return


def committed(request):
    topic = request["topic"]
    consumer = Consumer({"bootstrap.servers": request["bootstrap"], "group.id": request["group"],
                         "enable.auto.commit": False})
    result = consumer.committed([TopicPartition(topic, p) for p in request["partitions"]], timeout=30)
    failed = [f"{tp.partition}: {tp.error}" for tp in result if tp.error is not None]
    if failed:
        fail(f"OffsetFetch of group {request['group']!r}: {failed}")
    consumer.close()
    emit({"offsets": sorted([tp.partition, tp.offset] for tp in result)})


def produce(request):
    timeout = float(request.get("timeout_s", 60))
    producer = Producer({
        "bootstrap.servers": request["bootstrap"],
        "enable.idempotence": False,
        "acks": "all",
        "message.timeout.ms": int(timeout * 1000),
    })
    outcome = {}

    def on_delivery(err, msg):
        outcome["err"] = err

    start = time.monotonic()
    producer.produce(request["topic"], value=b"must not land", key=b"k", on_delivery=on_delivery)
    producer.flush(timeout + 10)
    elapsed = time.monotonic() - start
    err = outcome.get("err", "no delivery report")
    if err is None:
        emit({"delivered": True, "elapsed_s": elapsed})
    elif isinstance(err, str):
        emit({"delivered": False, "error_code": None, "error_name": err, "error_str": err, "retriable": False,
              "elapsed_s": elapsed})
    else:
        emit({"delivered": False, "error_code": err.code(), "error_name": err.name(), "error_str": err.str(),
              "retriable": err.retriable(), "elapsed_s": elapsed})


def lookups(request):
    from confluent_kafka.admin import AdminClient, ConfigResource

    topic = request["topic"]
    result = {"watermarks": [], "times": [], "configs": {}}
    for isolation in ["read_uncommitted", "read_committed"]:
        consumer = Consumer({"bootstrap.servers": request["bootstrap"], "group.id": "serve-lookups-unused",
                             "enable.auto.commit": False, "isolation.level": isolation})
        for p in request["partitions"]:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            result["watermarks"].append([p, isolation, low, high])
        if isolation == "read_uncommitted":
            # One request per timestamp: a request names each partition once.
            for ts in request["timestamps"]:
                found = consumer.offsets_for_times([TopicPartition(topic, p, ts) for p in request["partitions"]],
                                                   timeout=30)
                for tp in found:
                    if tp.error is not None:
                        fail(f"offsets_for_times {tp.partition} at {ts}: {tp.error}")
                result["times"].extend([tp.partition, ts, tp.offset] for tp in found)
        consumer.close()
    admin = AdminClient({"bootstrap.servers": request["bootstrap"]})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    for res, future in admin.describe_configs([resource], request_timeout=30).items():
        for name, entry in future.result().items():
            result["configs"][name] = entry.value
    emit(result)


def probe(request):
    consumer = Consumer({
        "bootstrap.servers": request["bootstrap"],
        "group.id": "serve-probe-unused",
        "enable.auto.commit": False,
        "auto.offset.reset": "error",
        "topic.metadata.refresh.interval.ms": 1000,
    })
    result = {"unknown_topic": None, "out_of_range": None}
    meta = consumer.list_topics(request["unknown_topic"], timeout=30).topics.get(request["unknown_topic"])
    if meta is not None and meta.error is not None:
        result["unknown_topic"] = {"code": meta.error.code(), "name": meta.error.name()}
    consumer.assign([TopicPartition(request["topic"], request["partition"], request["offset"])])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error() is None:
            result["out_of_range"] = {"code": 0, "name": "record", "str": f"a record at {msg.offset()}"}
            break
        if msg.error().code() != KafkaError._PARTITION_EOF:
            result["out_of_range"] = {"code": msg.error().code(), "name": msg.error().name(),
                                      "str": msg.error().str()}
            break
    consumer.close()
    emit(result)


def main():
    commands = {"follow": follow, "member": member, "committed": committed, "produce": produce, "probe": probe,
                "lookups": lookups}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        fail("usage: serve_client.py follow|member|committed|produce|probe|lookups < request.json")
    try:
        # One line: `member` reads its commands from the same stdin afterwards.
        request = json.loads(sys.stdin.readline())
        commands[sys.argv[1]](request)
    except KafkaException as e:
        fail(f"kafka error: {e}")


if __name__ == "__main__":
    main()
