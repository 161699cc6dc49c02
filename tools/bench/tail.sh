#!/usr/bin/env bash
# Benchmark: direct tail replication latency over loopback mutual TLS. A real single-node KRaft source
# broker (the harness's Kafka jars), `segmirror ship --connect` (push mode) tailing its log dir and
# `segmirror tail-apply --listen` appending to a mirror, both as processes; a producer at a fixed rate of 1 KiB
# records (Kafka's ProducerPerformance, acks=all, linger.ms=0) to a fresh one-partition topic per measurement.
#
# Latency: from a batch appended to the source's active .log to the mirror's copy reaching that size, sampled by
# tools/bench/tail_sampler.py polling both files' sizes every 1 ms (its measured loop period is printed: that is
# the resolution). p50 / p99 / max over every growth of the source file seen.
# Modes: log-end (`--upto log-end`), hw-bootstrap (`--upto high-watermark --source-bootstrap`: a Fetch the broker
# holds until the high watermark moves; `hw-list-offsets` is the same flags, its name from before, when they asked
# ListOffsets every 50 ms), hw-checkpoint (`--upto high-watermark` from replication-offset-checkpoint, the broker's
# default replica.high.watermark.checkpoint.interval.ms = 5 s: expect seconds).
# Also per measurement: wire bytes per log byte (the shipper's /proc/<pid>/io wchar: TLS records on the socket plus
# its few log lines, over the source .log bytes), CPU seconds per GiB of log on each side (/proc/<pid>/stat utime +
# stime, whole process life), and, with an unthrottled producer in log-end mode, the throughput ceiling (log bytes
# over the time from the first append to the mirror having all of it).
# Tail catch-up (BACKLOG_MIB > 0): the ceiling without the producer in the way. BACKLOG_MIB of 1 KiB records are
# written first (unthrottled, nothing shipping), then `segmirror tail-apply` and `segmirror ship --upto log-end`
# are started and timed from their start (process start and TLS handshake included) to the mirror holding every
# byte; reported next to `cp` + `sync FILE` of the same .log in the same run (the copy reads from the page cache,
# as the shipper does).
#
# Usage: tools/bench/tail.sh
#   RATES (default "1000 10000 50000") records/s; DURATION (default 30) seconds of producing per measurement;
#   MODES (default "log-end hw-bootstrap hw-checkpoint"); CEILING_RECORDS (default 1000000; 0 skips it);
#   RUNS (default 1) measurements per (mode, rate), each reported; BACKLOG_MIB (default 0: skipped; at most 1000,
#   one segment) for the tail catch-up; BENCH_DIR (default target/bench); BROKER_DATA_ROOT (say /dev/shm) puts
#   the broker's log dir on a filesystem of its own (tools/bench/lib.sh's start_broker says why). Each
#   measurement's directory keeps the sampler's trace (sampler.trace: wall-clock time each growth was seen, its
#   latency in ms, the mirror's size then), to line a slow growth up with the processes' logs.
#   TXN_MS (default unset) makes the producer transactional (ProducerPerformance --transactional-id), committing
#   every TXN_MS ms: a COMMIT marker in the log that often (what the appender's closed log records);
#   SEGMIRROR=path runs that binary instead of building target/release/segmirror;
#   SEGMIRROR_KAFKA_HOME (default .cache/kafka/4.4.0) holds the Kafka jars (libs/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RATES="${RATES:-1000 10000 50000}"
DURATION="${DURATION:-30}"
MODES="${MODES:-log-end hw-bootstrap hw-checkpoint}"
CEILING_RECORDS="${CEILING_RECORDS:-1000000}"
BACKLOG_MIB="${BACKLOG_MIB:-0}"
RUNS="${RUNS:-1}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
KAFKA_HOME="${SEGMIRROR_KAFKA_HOME:-$ROOT/.cache/kafka/4.4.0}"
BIN="${SEGMIRROR:-$ROOT/target/release/segmirror}"
WORK="$BENCH_DIR/tail"
# Longest wait for the mirror to catch up after the producer stops (the checkpoint mode needs one 5 s interval).
CATCH_UP_S="${CATCH_UP_S:-60}"
RECORD_BYTES=1024
TXN_MS="${TXN_MS:-}"
TXN_ARGS=()
[ -z "$TXN_MS" ] || TXN_ARGS=(--transactional-id segmirror-bench --transaction-duration-ms "$TXN_MS")

cd "$ROOT"
# shellcheck source=tools/bench/lib.sh
source "$ROOT/tools/bench/lib.sh"
[ -n "${SEGMIRROR:-}" ] || cargo build --release -q -p segmirror
[ -d "$KAFKA_HOME/libs" ] || { echo "no Kafka jars in $KAFKA_HOME/libs (set SEGMIRROR_KAFKA_HOME)" >&2; exit 2; }
rm -rf "$WORK"
mkdir -p "$WORK"
# The applier's catalogs in a data dir of this run: one left by an earlier run at the same mirror path (another
# topic id) would refuse the new topic as a recreated one.
export SEGMIRROR_HOME="$WORK/home"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "${#BROKER_DATA_DIRS[@]}" = 0 ] || rm -rf "${BROKER_DATA_DIRS[@]}"
}
trap cleanup EXIT

CERTS="$WORK/certs"
bench_certs "$CERTS"

# The source broker: single-node KRaft, Kafka's defaults (tools/bench/lib.sh).
mkdir -p "$WORK/broker"
start_broker "$WORK/broker"
LOG_DIR="$BROKER_LOG_DIR" BOOTSTRAP="$BROKER_BOOTSTRAP"

wchar() { awk '$1 == "wchar:" { print $2 }' "/proc/$1/io"; }

# One measurement: mode, rate (records/s; -1 unthrottled), records. Appends a table row to ROWS.
declare -a ROWS
N=0
measure() {
    local mode="$1" rate="$2" records="$3"
    N=$((N + 1))
    local topic="bench-$N" dir="$WORK/run-$N"
    mkdir -p "$dir"
    create_topic "$BOOTSTRAP" "$LOG_DIR" "$topic"
    local port upto=(--upto log-end)
    port=$(free_port)
    case "$mode" in
        hw-bootstrap | hw-list-offsets) upto=(--upto high-watermark --source-bootstrap "$BOOTSTRAP") ;;
        hw-checkpoint) upto=(--upto high-watermark) ;;
    esac
    "$BIN" tail-apply --mirror "$dir/mirror" --link bench --listen "127.0.0.1:$port" \
        --tls-cert "$CERTS/apply.crt" --tls-key "$CERTS/apply.key" --tls-ca "$CERTS/ca.crt" > "$dir/apply.out" 2>&1 &
    local apply_pid=$!
    PIDS+=("$apply_pid")
    "$BIN" ship --log-dir "$LOG_DIR" --topics "$topic" "${upto[@]}" --link bench --connect "localhost:$port" \
        --tls-cert "$CERTS/ship.crt" --tls-key "$CERTS/ship.key" --tls-ca "$CERTS/ca.crt" > "$dir/ship.out" 2>&1 &
    local ship_pid=$!
    PIDS+=("$ship_pid")
    local src="$LOG_DIR/$topic-0/00000000000000000000.log" mirror="$dir/mirror/$topic-0/00000000000000000000.log"
    SAMPLER_TRACE="$dir/sampler.trace" python3 "$ROOT/tools/bench/tail_sampler.py" "$src" "$mirror" "$dir/stop" "$CATCH_UP_S" > "$dir/sampler.out" &
    local sampler_pid=$!
    # Fixed rates: every record sent at once (linger.ms=0), so batches reach the log as the rate paces them; the
    # ceiling: batching as a throughput-minded producer would.
    local batching=(linger.ms=0)
    [ "$rate" -ge 0 ] || batching=(linger.ms=5 batch.size=262144)
    java_cp 512 org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records "$records" \
        --record-size "$RECORD_BYTES" --throughput "$rate" "${TXN_ARGS[@]}" \
        --producer-props "bootstrap.servers=$BOOTSTRAP" acks=all "${batching[@]}" > "$dir/producer.out" 2>&1
    touch "$dir/stop"
    local ok=yes
    wait "$sampler_pid" || ok=no
    local ship_cpu apply_cpu ship_w
    ship_cpu=$(cpu_s "$ship_pid") apply_cpu=$(cpu_s "$apply_pid") ship_w=$(wchar "$ship_pid")
    kill -TERM "$ship_pid" "$apply_pid"
    wait "$ship_pid" "$apply_pid" || true
    if [ "$ok" = yes ] && ! cmp -s "$src" "$mirror"; then ok="differs"; fi
    local samples p50 p99 max bytes first last done loop
    read -r samples p50 p99 max bytes first last done loop < "$dir/sampler.out"
    [ "$ok" = yes ] || { echo "run $N ($mode, $rate/s): mirror ${ok/no/did not catch up}; see $dir" >&2; }
    LOOP_MS+=("$loop")
    ROWS+=("$(awk -v m="$mode" -v r="$rate" -v n="$records" -v s="$samples" -v a="$p50" -v b="$p99" -v c="$max" \
        -v by="$bytes" -v l="$last" -v d="$done" -v sc="$ship_cpu" -v ac="$apply_cpu" -v w="$ship_w" -v ok="$ok" 'BEGIN {
        gib = by / 1073741824; rec = (l > 0 ? n / l : 0)
        label = (r < 0 ? "unthrottled" : r)
        printf "| %-15s | %11s | %8.0f | %7.1f | %7d | %7.1f | %7.1f | %7.1f | %6.3f | %8.1f | %8.1f | %s |",
            m, label, rec, by / 1048576, s, a, b, c, (by > 0 ? w / by : 0), sc / gib, ac / gib, ok }')")
    if [ "$rate" -lt 0 ]; then
        CEILING=$(awk -v by="$bytes" -v l="$last" -v d="$done" 'BEGIN {
            if (d == "nan") { print "mirror did not catch up"; exit }
            printf "producer %.0f MiB/s; mirror complete after %.2f s: %.0f MiB/s end to end", by / 1048576 / l, d, by / 1048576 / d }')
    fi
}

# The tail catch-up: a backlog written first, then ship + apply timed to the mirror holding all of it.
measure_backlog() {
    local mib="$1"
    N=$((N + 1))
    local topic="bench-$N" dir="$WORK/run-$N"
    mkdir -p "$dir"
    create_topic "$BOOTSTRAP" "$LOG_DIR" "$topic"
    java_cp 512 org.apache.kafka.tools.ProducerPerformance --topic "$topic" --num-records $((mib * 1024)) \
        --record-size "$RECORD_BYTES" --throughput -1 \
        --producer-props "bootstrap.servers=$BOOTSTRAP" acks=all linger.ms=5 batch.size=262144 > "$dir/producer.out" 2>&1
    local src="$LOG_DIR/$topic-0/00000000000000000000.log" mirror="$dir/mirror/$topic-0/00000000000000000000.log"
    local bytes port
    bytes=$(stat -c %s "$src")
    port=$(free_port)
    local start
    start=$(date +%s.%N)
    "$BIN" tail-apply --mirror "$dir/mirror" --link bench --listen "127.0.0.1:$port" \
        --tls-cert "$CERTS/apply.crt" --tls-key "$CERTS/apply.key" --tls-ca "$CERTS/ca.crt" > "$dir/apply.out" 2>&1 &
    local apply_pid=$!
    PIDS+=("$apply_pid")
    "$BIN" ship --log-dir "$LOG_DIR" --topics "$topic" --upto log-end --link bench --connect "localhost:$port" \
        --tls-cert "$CERTS/ship.crt" --tls-key "$CERTS/ship.key" --tls-ca "$CERTS/ca.crt" > "$dir/ship.out" 2>&1 &
    local ship_pid=$!
    PIDS+=("$ship_pid")
    local done_at
    done_at=$(python3 -c '
import os, sys, time
path, want, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
t0 = time.time()
while time.time() - t0 < limit:
    try:
        if os.stat(path).st_size >= want:
            print("%.6f" % time.time())
            sys.exit(0)
    except FileNotFoundError:
        pass
    time.sleep(0.002)
print("nan")
' "$mirror" "$bytes" "$CATCH_UP_S")
    local ship_cpu apply_cpu
    ship_cpu=$(cpu_s "$ship_pid") apply_cpu=$(cpu_s "$apply_pid")
    kill -TERM "$ship_pid" "$apply_pid"
    wait "$ship_pid" "$apply_pid" || true
    local ok=yes
    [ "$done_at" != nan ] || ok="did not catch up"
    [ "$ok" != yes ] || cmp -s "$src" "$mirror" || ok=differs
    local copy="$dir/copy.log" cstart cend
    cstart=$(date +%s.%N)
    cp "$src" "$copy" && sync "$copy"
    cend=$(date +%s.%N)
    rm -f "$copy"
    BACKLOG=$(awk -v by="$bytes" -v s="$start" -v d="$done_at" -v cs="$cstart" -v ce="$cend" -v sc="$ship_cpu" \
        -v ac="$apply_cpu" -v ok="$ok" 'BEGIN {
        mib = by / 1048576; gib = by / 1073741824
        if (d == "nan") { printf "%.0f MiB of backlog: mirror did not catch up", mib; exit }
        printf "%.0f MiB of backlog in %.2f s: %.0f MiB/s (cp + sync of the same .log: %.2f s, %.0f MiB/s; tail/cp %.2f); ship CPU %.1f s/GiB, apply CPU %.1f s/GiB; mirror = source: %s",
            mib, d - s, mib / (d - s), ce - cs, mib / (ce - cs), (ce - cs) / (d - s), sc / gib, ac / gib, ok }')
}

declare -a LOOP_MS
CEILING="not measured (CEILING_RECORDS=0)"
BACKLOG="not measured (BACKLOG_MIB=0)"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for mode in $MODES; do
    for rate in $RATES; do
        for run in $(seq "$RUNS"); do
            echo "measuring $mode at $rate records/s for ${DURATION}s (run $run/$RUNS)" >&2
            measure "$mode" "$rate" $((rate * DURATION))
        done
    done
done
if [ "$CEILING_RECORDS" -gt 0 ]; then
    echo "measuring the throughput ceiling: $CEILING_RECORDS records unthrottled, log-end" >&2
    measure log-end -1 "$CEILING_RECORDS"
fi
if [ "$BACKLOG_MIB" -gt 0 ]; then
    [ "$BACKLOG_MIB" -le 1000 ] || { echo "BACKLOG_MIB must be at most 1000 (one segment)" >&2; exit 2; }
    echo "measuring the tail catch-up: a backlog of $BACKLOG_MIB MiB, then ship + apply" >&2
    measure_backlog "$BACKLOG_MIB"
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
LOOP=$(printf '%s\n' "${LOOP_MS[@]}" | sort -g | tail -n1)

echo
echo "tail benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'): 1 partition, ${RECORD_BYTES}-byte records, acks=all," \
    "loopback mutual TLS, push mode; ${DURATION}s per measurement; sampler loop period <= ${LOOP} ms (resolution)"
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r);" \
    "load average before/after: $LOAD_BEFORE / $LOAD_AFTER"
echo "reproduce: ${SEGMIRROR:+SEGMIRROR=$SEGMIRROR }${BROKER_DATA_ROOT:+BROKER_DATA_ROOT=$BROKER_DATA_ROOT }${TXN_MS:+TXN_MS=$TXN_MS }RATES=\"$RATES\" DURATION=$DURATION MODES=\"$MODES\"" \
    "CEILING_RECORDS=$CEILING_RECORDS RUNS=$RUNS BACKLOG_MIB=$BACKLOG_MIB tools/bench/tail.sh"
echo
echo "| mode            | target rec/s | rec/s    | log MiB | samples | p50 ms  | p99 ms  | max ms  | wire/log | ship CPU s/GiB | apply CPU s/GiB | mirror = source |"
echo "|-----------------|-------------|----------|---------|---------|---------|---------|---------|----------|----------|----------|-----|"
printf '%s\n' "${ROWS[@]}"
echo
echo "throughput ceiling (log-end, unthrottled producer): $CEILING"
echo "tail catch-up (log-end, backlog written first): $BACKLOG"
