#!/usr/bin/env bash
# Benchmark: object-store tail latency (`ship --store`, `apply --follow`). A real single-node KRaft source broker (the
# harness's Kafka jars), `segmirror ship --store URL --upto log-end --upload-interval-ms 500` uploading tail chunks and
# `segmirror apply --store URL --follow` installing them into a mirror, both as processes; a producer at a fixed rate of
# 1 KiB records (Kafka's ProducerPerformance, acks=all, linger.ms=0) to a fresh one-partition topic per measurement. Two
# stores: a local folder and the S3-compatible server moto (loopback HTTP).
#
# Latency: from a batch appended to the source's active .log to the mirror's copy of that segment reaching that size
# (tools/bench/tail_sampler.py, polling both sizes every 1 ms): send -> on the source's disk is not included (acks=all
# on one broker: a fraction of a millisecond), so this is "appended at the source -> installed in the mirror".
# Also the requests: object puts (chunk objects, index objects, manifests) per second, from the store's contents.
#
# Usage: tools/bench/store_tail.sh
#   RATES (default "1000") records/s; DURATION (default 30) seconds of producing per measurement;
#   STORES (default "local s3"); INTERVAL_MS (default 500) --upload-interval-ms; POLL_MS (default 250)
#   --poll-interval-ms of the follower; BENCH_DIR (default target/bench);
#   SEGMIRROR=path runs that binary instead of building target/release/segmirror;
#   SEGMIRROR_KAFKA_HOME (default .cache/kafka/4.4.0) holds the Kafka jars (libs/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RATES="${RATES:-1000}"
DURATION="${DURATION:-30}"
STORES="${STORES:-local s3}"
INTERVAL_MS="${INTERVAL_MS:-500}"
POLL_MS="${POLL_MS:-250}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
KAFKA_HOME="${SEGMIRROR_KAFKA_HOME:-$ROOT/.cache/kafka/4.4.0}"
BIN="${SEGMIRROR:-$ROOT/target/release/segmirror}"
WORK="$BENCH_DIR/store_tail"
CATCH_UP_S="${CATCH_UP_S:-60}"
RECORD_BYTES=1024

cd "$ROOT"
[ -n "${SEGMIRROR:-}" ] || cargo build --release -q -p segmirror
[ -d "$KAFKA_HOME/libs" ] || { echo "no Kafka jars in $KAFKA_HOME/libs (set SEGMIRROR_KAFKA_HOME)" >&2; exit 2; }
rm -rf "$WORK"
mkdir -p "$WORK"
export SEGMIRROR_HOME="$WORK/home"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
java_cp() { java -Xmx"$1"m -XX:+UseSerialGC -Dlog4j2.configurationFile="$ROOT/tests/kafka/tools-log4j2.properties" \
    -cp "$KAFKA_HOME/libs/*" "${@:2}"; }

# The S3-compatible server (started only when STORES has s3).
S3_BUCKET=segmirror-bench
if [[ " $STORES " == *" s3 "* ]]; then
    S3_PORT=$(free_port)
    moto_server -H 127.0.0.1 -p "$S3_PORT" > "$WORK/moto.out" 2>&1 &
    PIDS+=("$!")
    export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1
    export AWS_ENDPOINT_URL="http://127.0.0.1:$S3_PORT" AWS_ALLOW_HTTP=true
    for _ in $(seq 120); do
        python3 -c 'import boto3; boto3.client("s3").create_bucket(Bucket="'$S3_BUCKET'")' 2>/dev/null && break
        sleep 0.5
    done
fi

# The source broker: single-node KRaft, defaults but for a short retention check (nothing expires here).
BROKER_PORT=$(free_port) CONTROLLER_PORT=$(free_port)
LOG_DIR="$WORK/broker/data"
mkdir -p "$LOG_DIR"
cat > "$WORK/broker/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$BROKER_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$BROKER_PORT
controller.listener.names=CONTROLLER
log.dirs=$LOG_DIR
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
auto.create.topics.enable=false
EOF
CLUSTER_ID=$(python3 -c 'import base64, uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')
java_cp 256 kafka.tools.StorageTool format "--cluster-id=$CLUSTER_ID" --config "$WORK/broker/server.properties" \
    > "$WORK/broker/format.out" 2>&1
java -Xmx1g -Xms1g -XX:+UseG1GC -Dkafka.logs.dir="$WORK/broker" \
    -Dlog4j2.configurationFile="$ROOT/tests/kafka/broker-log4j2.properties" \
    -cp "$KAFKA_HOME/libs/*" kafka.Kafka "$WORK/broker/server.properties" > "$WORK/broker/stdout" 2>&1 &
BROKER_PID=$!
PIDS+=("$BROKER_PID")
for _ in $(seq 240); do
    python3 - "$BROKER_PORT" <<'EOF' && break || sleep 0.5
import sys
from confluent_kafka.admin import AdminClient
a = AdminClient({"bootstrap.servers": "127.0.0.1:" + sys.argv[1]})
sys.exit(0 if a.list_topics(timeout=2).brokers else 1)
EOF
done 2>/dev/null
BOOTSTRAP="127.0.0.1:$BROKER_PORT"

create_topic() {
    python3 - "$BOOTSTRAP" "$1" <<'EOF'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": sys.argv[1]})
for f in a.create_topics([NewTopic(sys.argv[2], 1, 1)]).values():
    f.result(30)
EOF
    for _ in $(seq 200); do [ -f "$LOG_DIR/$1-0/00000000000000000000.log" ] && return; sleep 0.05; done
    echo "topic $1 has no partition dir" >&2
    exit 1
}

# One measurement: store kind, rate (records/s). Appends a table row to ROWS.
declare -a ROWS
declare -a LOOP_MS
N=0
measure() {
    local kind="$1" rate="$2" records=$(( $2 * DURATION ))
    N=$((N + 1))
    local topic="bench-$N" dir="$WORK/run-$N" url
    mkdir -p "$dir/mirror"
    create_topic "$topic"
    case "$kind" in
        local) url="$dir/bucket"; mkdir -p "$url" ;;
        s3) url="s3://$S3_BUCKET/run-$N" ;;
    esac
    "$BIN" ship --store "$url" --log-dir "$LOG_DIR" --topics "$topic" --upto log-end --link bench \
        --upload-interval-ms "$INTERVAL_MS" > "$dir/ship.out" 2>&1 &
    local ship_pid=$!
    PIDS+=("$ship_pid")
    "$BIN" apply --store "$url" --mirror "$dir/mirror" --catalog "$dir/catalog.sqlite" --link bench --follow \
        --poll-interval-ms "$POLL_MS" > "$dir/apply.out" 2>&1 &
    local apply_pid=$!
    PIDS+=("$apply_pid")
    local src="$LOG_DIR/$topic-0/00000000000000000000.log" mirror="$dir/mirror/$topic-0/00000000000000000000.log"
    python3 "$ROOT/tools/bench/tail_sampler.py" "$src" "$mirror" "$dir/stop" "$CATCH_UP_S" > "$dir/sampler.out" &
    local sampler_pid=$!
    local start
    start=$(date +%s.%N)
    java_cp 512 org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$records" \
        --record-size "$RECORD_BYTES" --throughput "$rate" \
        --producer-props "bootstrap.servers=$BOOTSTRAP" acks=all linger.ms=0 > "$dir/producer.out" 2>&1
    touch "$dir/stop"
    local ok=yes
    wait "$sampler_pid" || ok=no
    local elapsed
    elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
    kill -TERM "$ship_pid" "$apply_pid"
    wait "$ship_pid" "$apply_pid" || true
    if [ "$ok" = yes ] && ! cmp -s "$src" "$mirror"; then ok="differs"; fi
    local puts manifests
    case "$kind" in
        local)
            puts=$(find "$url" -type f | wc -l)
            manifests=$(find "$url" -path '*/manifests/*' -type f | wc -l) ;;
        s3)
            read -r puts manifests < <(python3 -c '
import boto3, sys
s3 = boto3.client("s3")
keys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[1], Prefix=sys.argv[2]) for o in p.get("Contents", [])]
print(len(keys), sum("/manifests/" in k for k in keys))' "$S3_BUCKET" "run-$N/") ;;
    esac
    # Manifests are overwritten per version (same key): count the chunk objects as the rounds that uploaded.
    local chunks
    case "$kind" in
        local) chunks=$(find "$url" -name '*.logchunk' | wc -l) ;;
        s3) chunks=$(python3 -c '
import boto3, sys
s3 = boto3.client("s3")
print(sum(o["Key"].endswith(".logchunk") for p in s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[1], Prefix=sys.argv[2]) for o in p.get("Contents", [])))' "$S3_BUCKET" "run-$N/") ;;
    esac
    local samples p50 p99 max bytes first last done loop
    read -r samples p50 p99 max bytes first last done loop < "$dir/sampler.out"
    [ "$ok" = yes ] || { echo "run $N ($kind, $rate/s): mirror ${ok/no/did not catch up}; see $dir" >&2; }
    LOOP_MS+=("$loop")
    ROWS+=("$(awk -v k="$kind" -v r="$rate" -v s="$samples" -v a="$p50" -v b="$p99" -v c="$max" -v by="$bytes" \
        -v ch="$chunks" -v o="$puts" -v el="$elapsed" -v ok="$ok" 'BEGIN {
        printf "| %-5s | %6s | %7.1f | %7d | %7.1f | %7.1f | %7.1f | %6d | %6.2f | %7d | %s |",
            k, r, by / 1048576, s, a, b, c, ch, ch / el, o, ok }')")
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for kind in $STORES; do
    for rate in $RATES; do
        echo "measuring $kind at $rate records/s for ${DURATION}s" >&2
        measure "$kind" "$rate"
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
LOOP=$(printf '%s\n' "${LOOP_MS[@]}" | sort -g | tail -n1)

echo
echo "object-store tail benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'): 1 partition, ${RECORD_BYTES}-byte records," \
    "acks=all, --upload-interval-ms $INTERVAL_MS, --poll-interval-ms $POLL_MS; ${DURATION}s per measurement;" \
    "sampler loop period <= ${LOOP} ms"
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r);" \
    "load average before/after: $LOAD_BEFORE / $LOAD_AFTER"
echo "reproduce: ${SEGMIRROR:+SEGMIRROR=$SEGMIRROR }RATES=\"$RATES\" DURATION=$DURATION STORES=\"$STORES\"" \
    "INTERVAL_MS=$INTERVAL_MS POLL_MS=$POLL_MS tools/bench/store_tail.sh"
echo
echo "| store | rec/s  | log MiB | samples | p50 ms  | p99 ms  | max ms  | chunks | chunks/s | objects | mirror = source |"
echo "|-------|--------|---------|---------|---------|---------|---------|--------|----------|---------|-----|"
printf '%s\n' "${ROWS[@]}"
