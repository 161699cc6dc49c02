#!/usr/bin/env python3
"""A transactional producer that leaves its transaction open until told how to end it (segmirror test harness).

  open_txn.py '<json>'   with {"bootstrap": ..., "transactional_id": "t1",
                               "sends": [{"topic": "t", "partition": 0, "count": 5, "prefix": "open"}, ...]}

Begins a transaction, produces and flushes every send (the records are on the broker, undecided), prints
`open` on stdout, then reads one line from stdin: `abort` or `commit` ends the transaction that way and prints
`done`. Used to seed a source while one of its transactions is open. Any failure exits non-zero with the reason on
stderr.
"""

import json
import sys

from confluent_kafka import Producer


def main():
    request = json.loads(sys.argv[1])
    producer = Producer({
        "bootstrap.servers": request["bootstrap"],
        "transactional.id": request["transactional_id"],
        "transaction.timeout.ms": 600000,
        "linger.ms": 0,
    })
    producer.init_transactions(60)
    producer.begin_transaction()
    for send in request["sends"]:
        for i in range(send["count"]):
            value = "%s-%d" % (send["prefix"], i)
            producer.produce(send["topic"], value=value.encode(), partition=send["partition"])
            # One record a batch, so that small segments roll inside the transaction.
            producer.flush(30)
    if producer.flush(30) != 0:
        sys.exit("records still unsent after 30 s")
    print("open", flush=True)
    decision = sys.stdin.readline().strip()
    if decision == "abort":
        producer.abort_transaction(60)
    elif decision == "commit":
        producer.commit_transaction(60)
    else:
        sys.exit("expected abort or commit, got %r" % decision)
    print("done", flush=True)


if __name__ == "__main__":
    main()
