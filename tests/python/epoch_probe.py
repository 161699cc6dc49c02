#!/usr/bin/env python3
"""Consumer-group probe for the leader-epoch experiments of `segmirror promote` (confluent-kafka / librdkafka).

The Rust side (tests/src/epoch_probe.rs) runs this script to learn how a real librdkafka consumer behaves on a
partition whose record batches carry leader epochs that differ from the broker's current leader epoch (KIP-320
offset validation, KIP-1279's "metadata refresh loop"). One run is one consumer session of a group on one
partition: it starts from the group's committed offset (or the earliest offset when none is committed), reads up
to `max_records` records (or to the end of the partition), commits the position after the last record it read --
with that record's leader epoch, as every KIP-320 client does -- and reports what happened.

  epoch_probe.py < request.json > result.json

request: {"bootstrap": "127.0.0.1:9092", "topic": "t", "partition": 0, "group": "g", "max_records": 10,
          "timeout_s": 20, "isolation": "read_committed"|"read_uncommitted"}
result:  {"committed_before": {"offset": o, "leader_epoch": e|null} | null,
          "records": [[offset, leader_epoch|null], ...], "reached_end": bool, "timed_out": bool,
          "errors": ["..."], "committed_after": {...} | null, "log": ["librdkafka lines about epochs/resets"]}

`timed_out` with no records means the consumer never fetched: the stall KIP-1279 describes. A first record below
the committed offset means the consumer reset its position (it re-reads what the group had already consumed).
"""

import json
import logging
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition, OFFSET_STORED

# librdkafka log lines worth reporting: epoch validation, truncation detection, offset resets.
LOG_NEEDLES = ("epoch", "truncat", "reset", "validat", "stale")
MAX_LOG_LINES = 200


class Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        text = record.getMessage()
        if len(self.lines) < MAX_LOG_LINES and any(n in text.lower() for n in LOG_NEEDLES):
            self.lines.append(text)


def committed(consumer, topic, partition):
    tp = consumer.committed([TopicPartition(topic, partition)], timeout=10)[0]
    if tp.offset < 0:
        return None
    return {"offset": tp.offset, "leader_epoch": tp.leader_epoch}


def main():
    request = json.load(sys.stdin)
    topic, partition = request["topic"], request["partition"]
    collect = Collect()
    logger = logging.getLogger("librdkafka")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(collect)
    consumer = Consumer({
        "bootstrap.servers": request["bootstrap"],
        "group.id": request["group"],
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "isolation.level": request.get("isolation", "read_uncommitted"),
        "debug": "consumer,fetch,topic",
    }, logger=logger)
    result = {"committed_before": committed(consumer, topic, partition), "records": [], "reached_end": False,
              "timed_out": False, "errors": [], "committed_after": None}
    consumer.assign([TopicPartition(topic, partition, OFFSET_STORED)])
    deadline = time.monotonic() + float(request.get("timeout_s", 20))
    last = None
    while len(result["records"]) < request["max_records"]:
        if time.monotonic() > deadline:
            result["timed_out"] = True
            break
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() == KafkaError._PARTITION_EOF:
                result["reached_end"] = True
                break
            result["errors"].append(str(msg.error()))
            continue
        result["records"].append([msg.offset(), msg.leader_epoch()])
        last = msg
    if last is not None:
        # Commits last.offset() + 1 with last's leader epoch.
        consumer.commit(message=last, asynchronous=False)
    result["committed_after"] = committed(consumer, topic, partition)
    consumer.close()
    result["log"] = collect.lines
    print(json.dumps(result))


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        sys.stderr.write(f"epoch_probe.py: kafka error: {e}\n")
        sys.exit(1)
