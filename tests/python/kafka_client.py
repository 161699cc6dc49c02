#!/usr/bin/env python3
"""Kafka client for the segmirror test harness (confluent-kafka / librdkafka).

The Rust harness (tests/src/clients.rs) runs this script and talks JSON with it, so that tests can use a real,
non-Java client for what the Java tools cannot do well: exact binary keys/values/headers, explicit timestamps,
idempotent producers, transactions with commits and aborts, and read_committed vs read_uncommitted consumption.

  kafka_client.py produce   < plan.json   > delivered.jsonl
  kafka_client.py consume   < query.json  > records.jsonl
  kafka_client.py admin     < request.json > result.json

Byte strings (keys, values, header values) travel as standard base64; null stays null.

produce plan:
  {"bootstrap": "127.0.0.1:9092", "topic": "t", "config": {<librdkafka producer properties>},
   "steps": [{"send": [{"partition": 0, "key": b64|null, "value": b64|null,
                        "headers": [["name", b64|null], ...], "timestamp": ms|null}, ...]},
             {"txn": "init"|"begin"|"commit"|"abort"}, {"flush": true}]}
  Every send step is flushed before the next step, so a transaction's records are on the broker before it is
  committed or aborted. Output: one line per sent record, in send order:
  {"index": i, "partition": p, "offset": o, "timestamp": ms, "timestamp_type": "CreateTime"|"LogAppendTime"}

consume query:
  {"bootstrap": ..., "topic": "t", "partitions": [0, 1] | null (all), "isolation": "read_committed"|
   "read_uncommitted", "timeout_s": 60}
  Reads every partition from its first offset to its end (high watermark, or the last stable offset for
  read_committed) and prints one line per record:
  {"partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers"}

admin request (one process for many topics: a JVM tool call per topic costs a second or more here):
  {"bootstrap": ..., "create": [{"name": "t", "partitions": 2, "config": {"k": "v"}}], "describe": ["t", ...]}
  A create entry may name "replica_assignment": [[node ids of partition 0], ...] instead of partitions and a
  replication factor (the first node of each list is the preferred leader).
  Creates the topics (waiting until each has a leader), then prints
  {"topics": {"t": {"topic_id": "<base64 uuid as in partition.metadata>", "partitions": 2}}} for the described ones.

group commit (a member of a consumer group commits offsets, then leaves):
  {"bootstrap": ..., "topic": "t", "group": "g", "protocol": "classic"|"consumer", "commit": [[partition, offset], ...]}
  Subscribes to the topic with group.protocol = protocol (KIP-848 for "consumer"), waits until it has an
  assignment, commits exactly the given offsets synchronously (auto commit off), closes. Prints {"committed": n}.

group resume (a member of a consumer group reads from the group's committed offsets to the end):
  {"bootstrap": ..., "topic": "t", "partitions": n, "group": "g", "protocol": "classic"|"consumer",
   "hold_s": 0}
  Subscribes with auto.offset.reset "error" (a partition without a committed offset is an error, never a silent
  reset), waits until all n partitions are assigned, reads each to its end and prints
  {"records": [[partition, offset, value b64], ...]}, committing nothing. With hold_s > 0 it prints
  {"assigned": n} once assigned and stays in the group for hold_s seconds instead (an active member).

txn offsets (a transactional producer commits offsets for a group with sendOffsetsToTransaction):
  {"bootstrap": ..., "topic": "t", "group": "g", "transactional_id": "x",
   "transactions": [{"offsets": [[partition, offset], ...], "end": "commit"|"abort"}, ...]}
  Each transaction sends the offsets (group metadata of a consumer that never joins: generation -1, as a simple
  consumer group) and is committed or aborted. Prints {"transactions": n}.

Any failure exits non-zero with the reason on stderr.
"""

import base64
import json
import sys
import time

from confluent_kafka import Consumer, TopicCollection, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, OFFSET_BEGINNING


def b64(data):
    return None if data is None else base64.b64encode(data).decode("ascii")


def unb64(text):
    return None if text is None else base64.b64decode(text)


def ts_type_name(kind):
    if kind == TIMESTAMP_CREATE_TIME:
        return "CreateTime"
    if kind == TIMESTAMP_LOG_APPEND_TIME:
        return "LogAppendTime"
    return "NoTimestamp"


def fail(message):
    sys.stderr.write(f"kafka_client.py: {message}\n")
    sys.exit(1)


def produce(plan):
    config = {"bootstrap.servers": plan["bootstrap"]}
    config.update(plan.get("config", {}))
    producer = Producer(config)
    topic = plan["topic"]
    delivered = {}
    errors = []
    index = 0

    def make_callback(i):
        def on_delivery(err, msg):
            if err is not None:
                errors.append(f"record {i}: {err}")
                return
            kind, ts = msg.timestamp()
            delivered[i] = {"index": i, "partition": msg.partition(), "offset": msg.offset(), "timestamp": ts,
                            "timestamp_type": ts_type_name(kind)}
        return on_delivery

    for step in plan["steps"]:
        if "send" in step:
            for rec in step["send"]:
                kwargs = {"value": unb64(rec.get("value")), "key": unb64(rec.get("key")),
                          "on_delivery": make_callback(index)}
                if rec.get("partition") is not None:
                    kwargs["partition"] = rec["partition"]
                if rec.get("timestamp") is not None:
                    kwargs["timestamp"] = rec["timestamp"]
                headers = rec.get("headers")
                if headers:
                    kwargs["headers"] = [(name, unb64(value)) for name, value in headers]
                while True:
                    try:
                        producer.produce(topic, **kwargs)
                        break
                    except BufferError:
                        producer.poll(0.1)
                index += 1
            remaining = producer.flush(60)
            if remaining:
                fail(f"{remaining} records not delivered within 60 s")
        elif "txn" in step:
            op = step["txn"]
            if op == "init":
                producer.init_transactions(60)
            elif op == "begin":
                producer.begin_transaction()
            elif op == "commit":
                producer.commit_transaction(60)
            elif op == "abort":
                producer.abort_transaction(60)
            else:
                fail(f"unknown txn op {op!r}")
        elif "flush" in step:
            producer.flush(60)
        else:
            fail(f"unknown step {step!r}")
        if errors:
            fail("; ".join(errors))
    producer.flush(60)
    if errors:
        fail("; ".join(errors))
    if len(delivered) != index:
        fail(f"{index} records sent but {len(delivered)} delivery reports")
    for i in range(index):
        print(json.dumps(delivered[i]))


def consume(query):
    """Every record of `topic` (or of each of `topics`, one client for all) from the start to the end."""
    topics = query.get("topics") or [query["topic"]]
    timeout = float(query.get("timeout_s", 60))
    config = {
        "bootstrap.servers": query["bootstrap"],
        "group.id": "segmirror-harness-dump",  # required by the client; no offsets are committed
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": query.get("isolation", "read_uncommitted"),
        "auto.offset.reset": "earliest",
    }
    consumer = Consumer(config)
    assignment = []
    for topic in topics:
        partitions = query.get("partitions")
        if partitions is None:
            metadata = consumer.list_topics(topic, timeout=timeout)
            meta = metadata.topics.get(topic)
            if meta is None or meta.error is not None:
                fail(f"topic {topic!r} not found: {meta.error if meta else 'no metadata'}")
            partitions = sorted(meta.partitions.keys())
        assignment.extend(TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions)
    consumer.assign(assignment)
    pending = {(tp.topic, tp.partition) for tp in assignment}
    deadline = time.monotonic() + timeout
    out = []
    while pending:
        if time.monotonic() > deadline:
            fail(f"timed out after {timeout} s; partitions not at their end: {sorted(pending)}")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() == KafkaError._PARTITION_EOF:
                pending.discard((msg.topic(), msg.partition()))
                continue
            fail(f"consume error: {msg.error()}")
        kind, ts = msg.timestamp()
        headers = msg.headers() or []
        out.append({"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(), "timestamp": ts,
                    "timestamp_type": ts_type_name(kind), "key": b64(msg.key()), "value": b64(msg.value()),
                    "headers": [[name, b64(value)] for name, value in headers]})
    consumer.close()
    out.sort(key=lambda r: (r["topic"], r["partition"], r["offset"]))
    for rec in out:
        print(json.dumps(rec))


def kafka_uuid_text(uuid):
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes without padding (confluent-kafka's str() uses the
    standard alphabet, which differs from what the broker writes into partition.metadata)."""
    raw = (uuid.get_most_significant_bits() & (2**64 - 1)).to_bytes(8, "big") + \
        (uuid.get_least_significant_bits() & (2**64 - 1)).to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def admin(request):
    from confluent_kafka.admin import AdminClient, NewTopic

    client = AdminClient({"bootstrap.servers": request["bootstrap"]})
    creates = request.get("create", [])
    if creates:
        new_topics = [NewTopic(t["name"], num_partitions=len(t["replica_assignment"]),
                               replica_assignment=t["replica_assignment"], config=t.get("config", {}))
                      if "replica_assignment" in t else
                      NewTopic(t["name"], num_partitions=t.get("partitions", 1),
                               replication_factor=t.get("replication_factor", 1),
                               config=t.get("config", {})) for t in creates]
        for name, future in client.create_topics(new_topics, operation_timeout=30, request_timeout=60).items():
            try:
                future.result()
            except KafkaException as e:
                fail(f"create topic {name!r}: {e}")
        # Creation returns when the controller accepted it; wait until every partition has a leader.
        deadline = time.monotonic() + 30
        for t in creates:
            expected = len(t["replica_assignment"]) if "replica_assignment" in t else t.get("partitions", 1)
            while True:
                meta = client.list_topics(t["name"], timeout=10).topics.get(t["name"])
                if (meta is not None and meta.error is None and len(meta.partitions) == expected
                        and all(p.leader >= 0 for p in meta.partitions.values())):
                    break
                if time.monotonic() > deadline:
                    fail(f"topic {t['name']!r} has no leader after 30 s")
                time.sleep(0.05)
    result = {"topics": {}}
    described = request.get("describe", [])
    if described:
        futures = client.describe_topics(TopicCollection(described), request_timeout=60)
        for name, future in futures.items():
            try:
                desc = future.result()
            except KafkaException as e:
                fail(f"describe topic {name!r}: {e}")
            result["topics"][name] = {"topic_id": kafka_uuid_text(desc.topic_id), "partitions": len(desc.partitions)}
    print(json.dumps(result))


def leaders(request):
    """Each partition's leader, replicas and in-sync replicas of the requested topics, as the cluster's metadata
    says now (-1: no leader)."""
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": request["bootstrap"]})
    result = {}
    for name in request["topics"]:
        meta = client.list_topics(name, timeout=10).topics.get(name)
        if meta is None or meta.error is not None:
            fail(f"metadata of topic {name!r}: {None if meta is None else meta.error}")
        result[name] = {str(p.id): {"leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs)}
                        for p in meta.partitions.values()}
    print(json.dumps(result))


def group_commit(request):
    topic = request["topic"]
    consumer = Consumer({
        "bootstrap.servers": request["bootstrap"],
        "group.id": request["group"],
        "group.protocol": request.get("protocol", "classic"),
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while not consumer.assignment():
        if time.monotonic() > deadline:
            fail(f"group {request['group']!r}: no assignment after 60 s")
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is not None and msg.error().code() != KafkaError._PARTITION_EOF:
            fail(f"group {request['group']!r}: {msg.error()}")
    offsets = [TopicPartition(topic, p, o) for p, o in request["commit"]]
    for tp in consumer.commit(offsets=offsets, asynchronous=False):
        if tp.error is not None:
            fail(f"group {request['group']!r}: commit of {tp.topic}-{tp.partition}: {tp.error}")
    consumer.close()
    print(json.dumps({"committed": len(offsets)}))


def group_resume(request):
    topic = request["topic"]
    wanted = int(request["partitions"])
    consumer = Consumer({
        "bootstrap.servers": request["bootstrap"],
        "group.id": request["group"],
        "group.protocol": request.get("protocol", "classic"),
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    })
    consumer.subscribe([topic])
    hold = float(request.get("hold_s", 0))
    deadline = time.monotonic() + 60
    records = []
    at_end = set()
    announced = False
    while True:
        if time.monotonic() > deadline:
            fail(f"group {request['group']!r}: assignment {consumer.assignment()}, at end {sorted(at_end)} after 60 s")
        msg = consumer.poll(0.2)
        if hold > 0 and not announced and len(consumer.assignment()) == wanted:
            print(json.dumps({"assigned": wanted}), flush=True)
            announced = True
            end = time.monotonic() + hold
            while time.monotonic() < end:
                consumer.poll(0.2)
            break
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                if len(at_end) == wanted:
                    break
                continue
            fail(f"group {request['group']!r}: {msg.error()}")
        at_end.discard(msg.partition())
        records.append([msg.partition(), msg.offset(), b64(msg.value())])
    consumer.close()
    if hold <= 0:
        print(json.dumps({"records": records}))


def txn_offsets(request):
    topic = request["topic"]
    producer = Producer({"bootstrap.servers": request["bootstrap"],
                         "transactional.id": request["transactional_id"]})
    consumer = Consumer({"bootstrap.servers": request["bootstrap"], "group.id": request["group"],
                         "enable.auto.commit": False})
    metadata = consumer.consumer_group_metadata()
    producer.init_transactions(60)
    for txn in request["transactions"]:
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(topic, p, o) for p, o in txn["offsets"]], metadata, 60)
        if txn["end"] == "commit":
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    consumer.close()
    print(json.dumps({"transactions": len(request["transactions"])}))


def main():
    commands = {"produce": produce, "consume": consume, "admin": admin, "leaders": leaders,
                "group": group_commit, "group_resume": group_resume, "txn_offsets": txn_offsets}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        fail("usage: kafka_client.py produce|consume|admin|leaders|group|group_resume|txn_offsets < request.json")
    try:
        request = json.load(sys.stdin)
        commands[sys.argv[1]](request)
    except KafkaException as e:
        fail(f"kafka error: {e}")


if __name__ == "__main__":
    main()
