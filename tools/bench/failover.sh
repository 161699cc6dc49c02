#!/usr/bin/env bash
# Benchmark: the RTO of `segmirror failover` against the size of the mirror. For each SIZE, a
# generated topic (`bulk`, PARTITIONS partitions, as catchup.sh generates it) is seeded into a local folder store and
# applied into a mirror (untimed), with the link's metadata read from a real target broker (Kafka 4.4) on which the
# topic exists; then `segmirror failover --link bench --now --handover auto` runs against that broker, with hooks
# that stop it (SIGTERM) and start it again (the same JVM command line). Timed: from the failover's start to the
# first record read on the target (a librdkafka consumer, offset 0 of partition 0) — the RTO: the cut, topics
# check, broker stop, install (handover by rename: mirror and log dir share a file system here), broker start (it
# loads the installed partitions), offsets step. The failover's own step times are printed from its report.
#
# Target: RTO(4 GiB) / RTO(40 MiB) < 2 on one file system.
#
# Usage: tools/bench/failover.sh                                 (SIZES="40MiB 4GiB", PARTITIONS=4, RUNS=1)
#   SEGMIRROR=path/to/segmirror (default target/release/segmirror, built if absent), KAFKA_HOME (default
#   .cache/kafka/4.4.0), BENCH_DIR (default target/bench; generated sources are kept and reused).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
KAFKA_HOME="${KAFKA_HOME:-$ROOT/.cache/kafka/4.4.0}"
SIZES="${SIZES:-40MiB 4GiB}"
PARTITIONS="${PARTITIONS:-4}"
RUNS="${RUNS:-1}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
BIN="${SEGMIRROR:-$ROOT/target/release/segmirror}"
PIDS=()
source "$ROOT/tools/bench/lib.sh"
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for f in "$BENCH_DIR"/failover-run/*/broker.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
}
trap cleanup EXIT
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release -q -p segmirror)

# The broker's JVM command line, for the start hook (the same as lib.sh's start_broker).
broker_start_cmd() {
    echo "cd '$1'; nohup java -Xmx1g -Xms1g -XX:+UseG1GC -Dkafka.logs.dir='$1' \
-Dlog4j2.configurationFile='$ROOT/tests/kafka/broker-log4j2.properties' -cp '$KAFKA_HOME/libs/*' kafka.Kafka \
'$1/server.properties' >> '$1/stdout' 2>&1 & echo \$! > '$1/broker.pid'"
}

# The topic on the target, keeping data forever (the generated records are old: a default retention would delete
# them at the broker's first check, and promote refuses that).
create_bulk_topic() {
    python3 - "$BROKER_BOOTSTRAP" "$PARTITIONS" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": sys.argv[1]})
t = NewTopic("bulk", int(sys.argv[2]), 1, config={"retention.ms": "-1"})
for f in a.create_topics([t]).values():
    f.result(30)
PY
    local p i
    for p in $(seq 0 $((PARTITIONS - 1))); do
        for i in $(seq 200); do [ -f "$BROKER_LOG_DIR/bulk-$p/00000000000000000000.log" ] && continue 2; sleep 0.05; done
        echo "topic bulk has no partition dir bulk-$p in $BROKER_LOG_DIR" >&2
        exit 1
    done
}

first_record_read() {
    python3 - "$1" <<'PY'
import sys
from confluent_kafka import Consumer, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "bench-rto", "enable.auto.commit": False})
c.assign([TopicPartition("bulk", 0, 0)])
while True:
    m = c.poll(1.0)
    if m is not None and m.error() is None:
        break
c.close()
PY
}

declare -A RTO STEPS BYTES
for SIZE in $SIZES; do
    SRC="$BENCH_DIR/failover-src-$SIZE-$PARTITIONS"
    if [ ! -f "$SRC/.complete" ]; then
        rm -rf "$SRC"
        echo "generating $SIZE in $PARTITIONS partition(s) into $SRC" >&2
        "$BIN" generate --out "$SRC" --bulk-bytes "$SIZE" --partitions "$PARTITIONS" --no-fsync >&2
        touch "$SRC/.complete"
    fi
    BYTES[$SIZE]=$(find "$SRC" -name '*.log' -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }')
    for run in $(seq "$RUNS"); do
        W="$BENCH_DIR/failover-run/$SIZE-$run"
        rm -rf "$W"
        mkdir -p "$W/broker"
        start_broker "$W/broker"
        echo "$BROKER_PID" > "$W/broker/broker.pid"
        create_bulk_topic
        # The link's metadata (the topic, its partition count) from the target's own metadata log: the generated
        # source has none.
        "$BIN" seed --log-dir "$SRC" --store "$W/store" --link bench --metadata-log-dir "$BROKER_LOG_DIR" \
            --topics bulk > "$W/seed.out" 2>&1
        "$BIN" apply --store "$W/store" --mirror "$W/mirror" --catalog "$W/catalog.sqlite" --link bench \
            > "$W/apply.out" 2>&1
        rm -rf "$W/store"
        sync
        { echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null || true
        load=$(cut -d' ' -f1 /proc/loadavg)
        start=$(date +%s.%N)
        "$BIN" failover --link bench --mirror "$W/mirror" --catalog "$W/catalog.sqlite" --now \
            --bootstrap "$BROKER_BOOTSTRAP" --log-dir "$BROKER_LOG_DIR" \
            --stop-hook "kill \$(cat '$W/broker/broker.pid')" \
            --start-hook "$(broker_start_cmd "$W/broker")" > "$W/failover.out" 2>&1
        first_record_read "$BROKER_BOOTSTRAP"
        end=$(date +%s.%N)
        RTO[$SIZE-$run]=$(echo "$end - $start" | bc)
        STEPS[$SIZE-$run]=$(grep -oE '^\[[a-z-]+\] .*\(([0-9.]+) s\)$' "$W/failover.out" \
            | sed -E 's/^\[([a-z-]+)\].*\(([0-9.]+) s\)$/\1 \2/' | tr '\n' ' ')
        grep -q "handed over by rename" "$W/failover.out" || echo "  $SIZE: not handed over by rename!" >&2
        echo "$SIZE run $run: RTO ${RTO[$SIZE-$run]} s (load $load); steps: ${STEPS[$SIZE-$run]}" >&2
        kill "$(cat "$W/broker/broker.pid")" 2>/dev/null || true
        sleep 3
        rm -rf "$W/mirror"
    done
done

echo
echo "| size | .log bytes | run | RTO s (failover start -> first record read) | steps (s) |"
echo "|---|---|---|---|---|"
for SIZE in $SIZES; do
    for run in $(seq "$RUNS"); do
        echo "| $SIZE | ${BYTES[$SIZE]} | $run | ${RTO[$SIZE-$run]} | ${STEPS[$SIZE-$run]} |"
    done
done
set -- $SIZES
if [ $# -ge 2 ]; then
    echo
    echo "RTO($2) / RTO($1), run 1: $(echo "scale=2; ${RTO[$2-1]} / ${RTO[$1-1]}" | bc)"
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: SEGMIRROR=$BIN SIZES=\"$SIZES\" PARTITIONS=$PARTITIONS RUNS=$RUNS tools/bench/failover.sh"
