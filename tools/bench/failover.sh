#!/usr/bin/env bash
# Benchmark: the RTO of `segmirror failover` against the target broker's own clean restart, at each size. For each
# SIZE, a generated topic (`bulk`, PARTITIONS partitions, as catchup.sh generates it) is seeded into a local folder
# store and applied into a mirror (untimed), with the link's metadata read from a real target broker (Kafka 4.4) on
# which the topic exists; then `segmirror failover --link bench --now --handover auto` runs against that broker, with
# hooks that stop it (SIGTERM) and start it again (the same JVM command line). The link's store is moved aside during
# the failover (a cut made now goes ahead without it, as in a disaster where the source site's bucket is gone).
#
# The target broker also holds the group coordinator's topic (`__consumer_offsets`, made before the failover), as any
# cluster in use does, so that the broker the failover starts loads what the clean restart after it loads.
#
# Timed, per run:
# - RTO: from the failover's start to a consumer on the target having read the LAST record of every partition: the
#   cut, topics check, broker stop, install (handover by rename: mirror and log dir share a file system here), broker
#   start (it loads the installed partitions), offsets step. The failover's own step times are printed from its
#   report, and when the consumer succeeded counted from the command's return.
# - restart: right after, the same target broker (now holding the installed data) given a clean restart: SIGTERM,
#   wait for the JVM to exit, start the same JVM command line, until the same consumer check succeeds; timed from the
#   SIGTERM.
# The page cache is dropped before each of the two (where permitted), so both start from the disk.
#
# The consumer check: a librdkafka consumer (confluent-kafka for Python, the default read_committed isolation)
# assigned every partition at its log end minus 1 (the ends are read from the generated source's
# recovery-point-offset-checkpoint), polling until it has read that record from each partition and the fetch's high
# watermark equals the end. It is started at the beginning of each timing, in the background, as an application's
# consumers already run when the target goes down: it retries (connections every 200 ms at most, an offset out of
# range by assigning again) until the data is served. The same check ends both timings.
#
# Target: RTO / restart (medians) <= 1.2 at every size.
#
# Disk: a size's source, store and mirror are never all kept at once. A run needs the store and the mirror (the mirror
# then moves into the broker's log dir by rename); the store is seeded once per size (from the first run's broker's
# metadata) and removed when the size is done. A source up to KEEP_SOURCE_MAX bytes is kept in BENCH_DIR and reused by
# later invocations; a larger one is generated, seeded and deleted before the first apply (so the peak is twice the
# size), and generated again by the next invocation.
#
# Usage: tools/bench/failover.sh                  (SIZES="40MiB 4GiB", PARTITIONS=4, RUNS=1)
#   SEGMIRROR=path/to/segmirror (default target/release/segmirror, built if absent), KAFKA_HOME (default
#   .cache/kafka/4.4.0), BENCH_DIR (default target/bench), KEEP_SOURCE_MAX (default 1GiB).
#   e.g. SIZES="40MiB 4GiB 16GiB" PARTITIONS=4 RUNS=3 tools/bench/failover.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
KAFKA_HOME="${KAFKA_HOME:-$ROOT/.cache/kafka/4.4.0}"
SIZES="${SIZES:-40MiB 4GiB}"
PARTITIONS="${PARTITIONS:-4}"
RUNS="${RUNS:-1}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
BIN="${SEGMIRROR:-$ROOT/target/release/segmirror}"
KEEP_SOURCE_MAX="${KEEP_SOURCE_MAX:-1GiB}"
PIDS=()
source "$ROOT/tools/bench/lib.sh"
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for f in "$BENCH_DIR"/failover-run/*/broker/broker.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
}
trap cleanup EXIT
[ -x "$BIN" ] || (cd "$ROOT" && cargo build --release -q --bin segmirror)

# SIZE with a KiB/MiB/GiB/TiB suffix (powers of 1024, as `generate --bulk-bytes` takes it) in bytes.
size_bytes() {
    local n="${1%%[!0-9]*}" unit="${1##*[0-9]}"
    case "$unit" in
        "" | B) echo "$n" ;;
        K | KiB) echo $((n << 10)) ;;
        M | MiB) echo $((n << 20)) ;;
        G | GiB) echo $((n << 30)) ;;
        T | TiB) echo $((n << 40)) ;;
        *) echo "size $1: use a KiB, MiB, GiB or TiB suffix" >&2; exit 1 ;;
    esac
}

# The broker's JVM command line, for the start hook and the clean restart (the same as lib.sh's start_broker).
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

# The group coordinator's topic (__consumer_offsets, 50 partitions) on the target, as any cluster in use has it: a
# consumer's first group lookup creates it. Made before the failover, so that the broker the failover restarts loads
# what the clean restart after it loads (the consumer check's own group lookup would otherwise create it in between).
create_offsets_topic() {
    python3 - "$BROKER_BOOTSTRAP" <<'PY'
import sys, time
from confluent_kafka import Consumer, KafkaException, TopicPartition
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "bench-rto", "enable.auto.commit": False})
deadline = time.monotonic() + 60
while True:
    try:
        # Answered once the coordinator has loaded the group's partition (NOT_COORDINATOR, or a
        # COORDINATOR_LOAD_IN_PROGRESS, until then).
        c.committed([TopicPartition("bulk", 0)], timeout=10)
        break
    except KafkaException:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
c.close()
PY
    local i
    for i in $(seq 200); do [ -d "$BROKER_LOG_DIR/__consumer_offsets-49" ] && return; sleep 0.05; done
    echo "no __consumer_offsets partitions in $BROKER_LOG_DIR" >&2
    exit 1
}

# last_records_read BOOTSTRAP PARTITION:END...: the consumer check (see the header); fails after 600 s.
last_records_read() {
    python3 - "$@" <<'PY'
import sys, time
from confluent_kafka import Consumer, TopicPartition
bootstrap = sys.argv[1]
pending = {int(p): int(e) for p, e in (a.split(":") for a in sys.argv[2:])}
c = Consumer({
    "bootstrap.servers": bootstrap, "group.id": "bench-rto", "enable.auto.commit": False,
    "auto.offset.reset": "error", "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
    "retry.backoff.ms": 50, "retry.backoff.max.ms": 200, "log_level": 0,
})
assign = lambda: c.assign([TopicPartition("bulk", p, e - 1) for p, e in pending.items()])
assign()
deadline = time.monotonic() + 600
last_assign = time.monotonic()
while pending:
    if time.monotonic() > deadline:
        sys.exit(f"the last records of partitions {sorted(pending)} not read within 600 s")
    m = c.poll(0.1)
    if m is None:
        continue
    if m.error() is not None:
        # e.g. an offset out of range while the broker loads its logs (auto.offset.reset=error): ask again.
        if time.monotonic() - last_assign > 0.2:
            assign()
            last_assign = time.monotonic()
        continue
    p = m.partition()
    if p in pending and m.offset() == pending[p] - 1:
        _, high = c.get_watermark_offsets(TopicPartition("bulk", p), cached=True)
        if high != pending[p]:
            sys.exit(f"bulk-{p}: high watermark {high}, expected {pending[p]}")
        del pending[p]
c.close()
PY
}

# start_reader FILE: the consumer check in the background (its pid in READER), started at the beginning of a timing
# as an application's consumers are already running; it writes the time it succeeded into FILE.
start_reader() {
    # shellcheck disable=SC2086
    (last_records_read "$BROKER_BOOTSTRAP" $ENDS && date +%s.%N > "$1") > /dev/null &
    READER=$!
}

# reader_end FILE: waits for the reader; READ_END is the time it succeeded (the script fails if it did not).
reader_end() {
    wait "$READER" || { echo "the consumer check failed" >&2; exit 1; }
    READ_END=$(cat "$1")
}

# wait_exit PID: until the process has exited (a zombie counts as exited).
wait_exit() {
    while [ -e "/proc/$1" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]; do sleep 0.02; done
}

# secs START END: END - START (date +%s.%N), to 0.01 s.
secs() { printf '%.2f' "$(echo "$2 - $1" | bc)"; }

# ratio A B: A / B, to 0.01.
ratio() { printf '%.2f' "$(echo "scale=4; $1 / $2" | bc)"; }

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f", m }'; }

keep_max=$(size_bytes "$KEEP_SOURCE_MAX")
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A SKIPPED RTO FAILOVER_CMD CONSUMER LOAD RESTART RESTART_STOP STEPS BYTES
for SIZE in $SIZES; do
    SRC="$BENCH_DIR/failover-src-$SIZE-$PARTITIONS"
    STORE="$BENCH_DIR/failover-store-$SIZE-$PARTITIONS"
    bytes=$(size_bytes "$SIZE")
    rm -rf "$STORE" "$STORE.aside"
    # Free space needed besides what the source takes (the store, then the mirror; both with a kept source), plus
    # 1 GiB left to the machine.
    need=$((bytes + (1 << 30)))
    [ "$bytes" -le "$keep_max" ] && need=$((bytes * 2 + (1 << 30)))
    [ -f "$SRC/.complete" ] || need=$((need + bytes))
    avail=$(df --output=avail -B1 "$BENCH_DIR" | tail -1)
    if [ "$avail" -lt "$need" ]; then
        SKIPPED[$SIZE]="skipped: $need bytes of free space needed in $BENCH_DIR, $avail free"
        echo "$SIZE: ${SKIPPED[$SIZE]}" >&2
        continue
    fi
    if [ ! -f "$SRC/.complete" ]; then
        rm -rf "$SRC"
        echo "generating $SIZE in $PARTITIONS partition(s) into $SRC" >&2
        "$BIN" generate --out "$SRC" --bulk-bytes "$SIZE" --partitions "$PARTITIONS" --no-fsync >&2
        touch "$SRC/.complete"
    fi
    BYTES[$SIZE]=$(find "$SRC" -name '*.log' -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }')
    # Every partition's log end: the generated source's recovery point is its log end.
    ENDS=$(awk 'NR > 2 && $1 == "bulk" { printf "%s:%s ", $2, $3 }' "$SRC/recovery-point-offset-checkpoint")
    for run in $(seq "$RUNS"); do
        W="$BENCH_DIR/failover-run/$SIZE-$run"
        rm -rf "$W"
        mkdir -p "$W/broker"
        start_broker "$W/broker"
        echo "$BROKER_PID" > "$W/broker/broker.pid"
        create_bulk_topic
        create_offsets_topic
        if [ "$run" = 1 ]; then
            # The link's metadata (the topic, its partition count) from the target's own metadata log: the
            # generated source has none.
            "$BIN" seed --log-dir "$SRC" --store "$STORE" --link bench --metadata-log-dir "$BROKER_LOG_DIR" \
                --topics bulk > "$W/seed.out" 2>&1
            [ "$bytes" -gt "$keep_max" ] && rm -rf "$SRC"
        fi
        "$BIN" apply --store "$STORE" --mirror "$W/mirror" --catalog "$W/catalog.sqlite" --link bench \
            > "$W/apply.out" 2>&1
        mv "$STORE" "$STORE.aside"
        drop_caches
        load=$(cut -d' ' -f1 /proc/loadavg)
        start=$(date +%s.%N)
        start_reader "$W/failover.read"
        "$BIN" failover --link bench --mirror "$W/mirror" --catalog "$W/catalog.sqlite" --now \
            --bootstrap "$BROKER_BOOTSTRAP" --log-dir "$BROKER_LOG_DIR" \
            --stop-hook "kill \$(cat '$W/broker/broker.pid')" \
            --start-hook "$(broker_start_cmd "$W/broker")" > "$W/failover.out" 2>&1
        returned=$(date +%s.%N)
        reader_end "$W/failover.read"
        end=$READ_END
        mv "$STORE.aside" "$STORE"
        RTO[$SIZE-$run]=$(secs "$start" "$end")
        FAILOVER_CMD[$SIZE-$run]=$(secs "$start" "$returned")
        CONSUMER[$SIZE-$run]=$(secs "$returned" "$end")
        LOAD[$SIZE-$run]=$load
        STEPS[$SIZE-$run]=$(grep -oE '^\[[a-z-]+\] .*\(([0-9.]+) s\)$' "$W/failover.out" \
            | sed -E 's/^\[([a-z-]+)\].*\(([0-9.]+) s\)$/\1 \2/' | tr '\n' ' ' | sed 's/ $//')
        grep -q "handed over by rename" "$W/failover.out" || echo "  $SIZE: not handed over by rename!" >&2

        # The baseline: the same broker, now holding the installed data, given a clean restart.
        drop_caches
        pid=$(cat "$W/broker/broker.pid")
        start=$(date +%s.%N)
        start_reader "$W/restart.read"
        kill "$pid"
        wait_exit "$pid"
        stopped=$(date +%s.%N)
        sh -c "$(broker_start_cmd "$W/broker")"
        reader_end "$W/restart.read"
        end=$READ_END
        RESTART[$SIZE-$run]=$(secs "$start" "$end")
        RESTART_STOP[$SIZE-$run]=$(secs "$start" "$stopped")
        echo "$SIZE run $run: RTO ${RTO[$SIZE-$run]} s (failover ${FAILOVER_CMD[$SIZE-$run]} s, read" \
            "${CONSUMER[$SIZE-$run]} s after it returned), clean restart ${RESTART[$SIZE-$run]} s (stop ${RESTART_STOP[$SIZE-$run]} s)" \
            "(load $load); failover steps: ${STEPS[$SIZE-$run]}" >&2
        pid=$(cat "$W/broker/broker.pid")
        kill "$pid" 2>/dev/null || true
        wait_exit "$pid"
        rm -rf "$W"
    done
    rm -rf "$STORE"
done

echo
echo "| size | .log bytes | RTO s, each run | median RTO s | clean restart s, each run | median restart s |" \
    "RTO / restart (medians) | RTO / restart, each run | median of the runs' ratios |"
echo "|---|---|---|---|---|---|---|---|---|"
for SIZE in $SIZES; do
    if [ -n "${SKIPPED[$SIZE]:-}" ]; then
        echo "| $SIZE | ${SKIPPED[$SIZE]} | | | | | | | |"
        continue
    fi
    rtos="" restarts="" ratios=""
    for run in $(seq "$RUNS"); do
        rtos+="${RTO[$SIZE-$run]} "
        restarts+="${RESTART[$SIZE-$run]} "
        ratios+="$(ratio "${RTO[$SIZE-$run]}" "${RESTART[$SIZE-$run]}") "
    done
    m_rto=$(echo "$rtos" | median)
    m_restart=$(echo "$restarts" | median)
    echo "| $SIZE | ${BYTES[$SIZE]} | ${rtos% } | $m_rto | ${restarts% } | $m_restart |" \
        "$(ratio "$m_rto" "$m_restart") | ${ratios% } | $(echo "$ratios" | median) |"
done
echo
echo "Each run: the RTO; the failover command's wall time; when the consumer read the last records, counted from the"
echo "command's return (negative: before it returned); the failover's steps (s, from its report); the clean restart"
echo "and its stop part (SIGTERM to the JVM's exit); the 1-min load average."
echo
echo "| size | run | RTO s | failover s | read after return s | failover steps s | restart s | restart: stop s | load |"
echo "|---|---|---|---|---|---|---|---|---|"
for SIZE in $SIZES; do
    [ -n "${SKIPPED[$SIZE]:-}" ] && continue
    for run in $(seq "$RUNS"); do
        echo "| $SIZE | $run | ${RTO[$SIZE-$run]} | ${FAILOVER_CMD[$SIZE-$run]} | ${CONSUMER[$SIZE-$run]} |" \
            "${STEPS[$SIZE-$run]} | ${RESTART[$SIZE-$run]} | ${RESTART_STOP[$SIZE-$run]} | ${LOAD[$SIZE-$run]} |"
    done
done
echo
echo "load average (1, 5, 15 min) at the start: $load_start; at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: SEGMIRROR=$BIN SIZES=\"$SIZES\" PARTITIONS=$PARTITIONS RUNS=$RUNS KEEP_SOURCE_MAX=$KEEP_SOURCE_MAX" \
    "tools/bench/failover.sh"
