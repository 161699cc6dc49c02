#!/usr/bin/env python3
"""confluent-kafka group clients for the failover of a group that consumed from `segmirror serve`
(tests/tests/e2e_serve_failover.rs).

The test needs a group that stops at a position it knows in advance: each partition read up to exactly a given
number of records, then committed synchronously as an application does (the offsets it stored, with the leader
epoch of the record each was stored from), by a group of several members that has rebalanced. Neither
kafka_client.py's `group` (it commits offsets given to it, without reading) nor serve_client.py's `member` (it reads
everything and commits what it is told) does that. Every command reads one JSON request on stdin and prints one JSON
object.

  serve_failover.py take       {"bootstrap", "topic", "group", "members", "take": {partition: count}, "timeout_s"}
      `members` classic-protocol members in this process subscribe; once every member holds partitions and every
      partition is assigned, each reads its partitions from the group's position up to `take` records a partition
      (counted since the partition was last assigned; a partition that reached its count is paused), storing each
      record's offset; then every member commits synchronously and closes. Prints {"members": [[partition, ..], ..],
      "read": [[partition, first offset, last offset, count], ..], "committed": [[partition, offset, epoch], ..]}.
  serve_failover.py committed  {"bootstrap", "topic", "group", "partitions": [..]}
      OffsetFetch of the group without joining it: {"offsets": [[partition, offset, epoch], ..]} (-1001: none;
      epoch null when none was committed).
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition


def fail(message):
    sys.stderr.write(f"serve_failover.py: {message}\n")
    sys.exit(1)


def epoch(tp):
    value = getattr(tp, "leader_epoch", None)
    return None if value is None or value < 0 else value


class Member:
    """One consumer of the group and what it read since each partition was last assigned to it."""

    def __init__(self, request, index):
        self.index = index
        self.topic = request["topic"]
        self.take = {int(p): int(n) for p, n in request["take"].items()}
        self.assigned = set()
        self.read = {}  # partition -> [first, last, count]
        self.consumer = Consumer({
            "bootstrap.servers": request["bootstrap"],
            "group.id": request["group"],
            "group.protocol": "classic",
            "client.id": f"serve-failover-{index}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 30000,
        })
        self.consumer.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke)

    def on_assign(self, consumer, partitions):
        # Assigned here so that the partitions can be resumed: one paused before a rebalance is read again from
        # the group's position.
        consumer.assign(partitions)
        consumer.resume(partitions)
        for tp in partitions:
            self.assigned.add(tp.partition)
            self.read.pop(tp.partition, None)

    def on_revoke(self, consumer, partitions):
        for tp in partitions:
            self.assigned.discard(tp.partition)
            self.read.pop(tp.partition, None)

    def done(self, partition):
        return self.read.get(partition, [0, 0, 0])[2] >= self.take[partition]

    def poll(self):
        msg = self.consumer.poll(0.1)
        if msg is None:
            return
        if msg.error() is not None:
            if msg.error().code() != KafkaError._PARTITION_EOF:
                fail(f"member {self.index}: {msg.error()}")
            return
        p = msg.partition()
        if p not in self.assigned or self.done(p):
            return  # fetched before the pause took effect: neither counted nor stored
        entry = self.read.setdefault(p, [msg.offset(), msg.offset(), 0])
        entry[1] = msg.offset()
        entry[2] += 1
        self.consumer.store_offsets(message=msg)
        if self.done(p):
            self.consumer.pause([TopicPartition(self.topic, p)])


def take(request):
    count = int(request.get("members", 1))
    partitions = {int(p) for p in request["take"]}
    members = [Member(request, i) for i in range(count)]
    deadline = time.monotonic() + float(request.get("timeout_s", 90))
    while True:
        if time.monotonic() > deadline:
            state = [(sorted(m.assigned), m.read) for m in members]
            fail(f"the group never reached its counts: {state}")
        for m in members:
            m.poll()
        assigned = [p for m in members for p in m.assigned]
        if (all(m.assigned for m in members) and sorted(assigned) == sorted(partitions)
                and all(m.done(p) for m in members for p in m.assigned)):
            break
    committed = []
    for m in members:
        try:
            done = m.consumer.commit(asynchronous=False)
        except KafkaException as e:
            fail(f"member {m.index}: commit: {e}")
        for tp in done:
            if tp.error is not None:
                fail(f"member {m.index}: commit of partition {tp.partition}: {tp.error}")
            committed.append([tp.partition, tp.offset, epoch(tp)])
    read = sorted([p] + entry for m in members for p, entry in m.read.items())
    shares = [sorted(m.assigned) for m in members]
    for m in members:
        m.consumer.close()
    print(json.dumps({"members": shares, "read": read, "committed": sorted(committed)}))


def committed(request):
    consumer = Consumer({"bootstrap.servers": request["bootstrap"], "group.id": request["group"],
                         "enable.auto.commit": False})
    result = consumer.committed([TopicPartition(request["topic"], p) for p in request["partitions"]], timeout=30)
    failed = [f"{tp.partition}: {tp.error}" for tp in result if tp.error is not None]
    if failed:
        fail(f"OffsetFetch of group {request['group']!r}: {failed}")
    consumer.close()
    print(json.dumps({"offsets": sorted([tp.partition, tp.offset, epoch(tp)] for tp in result)}))


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("take", "committed"):
        fail("usage: serve_failover.py take|committed < request.json")
    request = json.loads(sys.stdin.readline())
    {"take": take, "committed": committed}[sys.argv[1]](request)


if __name__ == "__main__":
    main()
