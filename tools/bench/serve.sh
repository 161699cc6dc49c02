#!/usr/bin/env bash
# Benchmark: `segmirror serve` (the read-only Kafka endpoint over a mirror root) against a stock Kafka broker
# serving the same bytes, and its end-to-end latency beside MirrorMaker 2's, in one run on one machine. Brokers are
# single-node KRaft brokers on the harness's Kafka jars (tools/bench/lib.sh); segmirror runs as processes.
#
# 1. Consumer throughput. Kafka's ProducerPerformance writes SIZE_MIB of 1 KiB records (acks=all, lz4, linger.ms=5,
#    batch.size=262144, as tools/bench/mm2.sh) into a topic of PARTITIONS partitions on the source broker. segmirror
#    ship --connect + apply --listen (plaintext, `--upto high-watermark --source-bootstrap`) copy it into a mirror
#    until the mirror's .log files hold every byte of the source's; then both stop. The mirror is promoted
#    (`segmirror promote --handover copy`: the mirror keeps its files) into a second broker's log dir (the topic
#    created there first, the broker stopped for the promotion and started again): the stock broker serving the
#    same bytes (the script checks every promoted .log equals the mirror's). The catalog is put back as apply left
#    it (promotion marks the link promoted, and serve stops for a promoted link), and `segmirror serve --plaintext`
#    serves the mirror. Then RUNS times, alternately serve then broker, each from a cold page cache (`sync` and
#    drop_caches; "warm" in the output where that is refused, or with CACHE=warm): Kafka's ConsumerPerformance
#    (kafka-consumer-perf-test, a fresh group each run, Kafka 4.4's consumer defaults) reads every record.
#    Figures per run: the tool's fetch.MB.sec (MiB of record keys and values, as the tool counts, over its fetch
#    time, which leaves out the group join) and MB.sec (over the whole run, group join included: a
#    broker delays a new group's first rebalance by group.initial.rebalance.delay.ms, 3 s by default); the CPU
#    seconds (utime + stime from /proc/<pid>/stat) the SERVER process used from the tool's start to its end: serve's
#    pid, the broker's JVM. The consumer's own CPU is not counted (it is the same JVM tool on both sides). Medians
#    over the runs, and serve / broker ratios of both.
# 2. End-to-end latency, per rate in RATES (records/s of 1 KiB, uncompressed, acks=all, linger.ms=0:
#    tools/bench/mm2_probe.py's producer, stamping each value with its send time) for DURATION seconds, a fresh
#    one-partition source topic per side and rate, the same consumer (mm2_probe.py consume's: librdkafka,
#    assigned partition 0, fetch.wait.max.ms=100, receive time - send time, one clock). Before each measurement
#    WARMUP_S seconds of records at the same rate are produced and read back on the side measured (the topic exists
#    there and its whole path is running: a cold MirrorMaker 2 JVM or a topic the endpoint does not list yet is not
#    what is measured); the consumer starts after them.
#    - source: the same consumer on the source topic itself, the floor every path below includes (this producer,
#      librdkafka and the source broker on this machine);
#    - MirrorMaker 2 (tools/bench/mm2.sh's configuration and jars: dedicated driver, identity policy) into the
#      second broker, the consumer on its target topic; MirrorMaker 2 runs through all the measurements;
#    - segmirror per mode in SM_MODES (high-watermark = ship `--upto high-watermark --source-bootstrap`; log-end =
#      `--upto log-end --source-bootstrap`: the mirror gets every batch at once, serve shows it up to the high
#      watermark the shipper reports): ship --connect + apply --listen over loopback
#      mutual TLS (the direct link as deployed) + serve --plaintext on the mirror, started per measurement, the
#      consumer on serve. That is send -> source log -> ship -> apply (fsync, install) -> serve (its catalog refresh
#      every 10 ms wakes long-polling fetches) -> consumer.
#    - segmirror mode bucket in SM_MODES: the path through an object store, no mirror and no applier. ship --store
#      (a local folder under the run's directory as the bucket, `--upto high-watermark --source-bootstrap`,
#      --upload-interval-ms BUCKET_UPLOAD_MS, default 500) + serve --store on the same folder (--cache-dir,
#      --cache-size BUCKET_CACHE_MIB, default 256, --poll-interval-ms BUCKET_POLL_MS, default 100, --plaintext),
#      both started per measurement, the consumer on serve. That is send -> source log -> ship (an upload round at
#      most every interval: segment versions and manifests written to the folder) -> serve (a look at the store
#      every poll interval, the new segment version fetched into its cache and checked) -> consumer. A local folder
#      leaves out an object store's own request latency (S3 PUT and GET round trips). SPLIT=1 observes no mirror
#      file here.
#      The topic's one segment grows by RATE KiB/s over WARMUP_S + DURATION (about 360 MB at 10,000 records/s):
#      once its chunked versions pass a quarter of BUCKET_CACHE_MIB serve caches them chunk by chunk, so a small
#      cache tests that path.
#    p50 / p99 / max over every record; serve's CPU seconds during the measurement. SPLIT=1 also runs
#    mm2_probe.py's mirror observer (the mirror's .log polled every 1 ms: when each record's batch is complete in the
#    file) beside the consumer: the share of the latency spent before serve (its own polling takes some CPU from
#    the measured processes, so it is off by default).
# The machine has 2 CPUs shared with the clients, brokers and the tools measured: every figure is contended.
#
# Usage: tools/bench/serve.sh
#   SIZE_MIB (default 1024) of 1 KiB records; PARTITIONS (default 8); RUNS (default 3) consumer runs per side;
#   CACHE (default cold; warm skips dropping the page cache; a BENCH_DIR on tmpfs is always in memory); RATES (default "1000 10000"); DURATION (default 30)
#   seconds per latency measurement, after WARMUP_S (default 5) seconds of warm-up; BROKER_DATA_ROOT (say /dev/shm)
#   puts the brokers' log dirs on a filesystem of their own (tools/bench/lib.sh's start_broker says why);
#   PROBE_LINGER_MS (default 0) the
#   latency producer's linger.ms; SM_MODES (default "high-watermark log-end";
#   bucket too: see 2; BUCKET_UPLOAD_MS, BUCKET_POLL_MS, BUCKET_CACHE_MIB set it); SKIP_MM2=1 leaves MirrorMaker 2
#   out (its rows say so); SPLIT=1 (see 2); SKIP_THROUGHPUT=1 / SKIP_LATENCY=1 leave a part out; MM2_VERSION (default 4.3.1) and
#   MM2_HOME (default .cache/connect-mirror/<version>, fetched by tools/bench/mm2.sh); BENCH_DIR (default
#   target/bench; the run's data is removed at the end unless KEEP=1); SEGMIRROR=path runs that binary instead of
#   building target/release/segmirror; SEGMIRROR_KAFKA_HOME (default .cache/kafka/4.4.0) holds the brokers' jars.
# Not a test: scripts/test-all.sh does not run it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SIZE_MIB="${SIZE_MIB:-1024}"
PARTITIONS="${PARTITIONS:-8}"
RUNS="${RUNS:-3}"
CACHE="${CACHE:-cold}"
CACHE_ARG="$CACHE"
RATES="${RATES:-1000 10000}"
DURATION="${DURATION:-30}"
WARMUP_S="${WARMUP_S:-5}"
SM_MODES="${SM_MODES:-high-watermark log-end}"
BUCKET_UPLOAD_MS="${BUCKET_UPLOAD_MS:-500}"
BUCKET_POLL_MS="${BUCKET_POLL_MS:-100}"
BUCKET_CACHE_MIB="${BUCKET_CACHE_MIB:-256}"
SKIP_MM2="${SKIP_MM2:-0}"
SKIP_THROUGHPUT="${SKIP_THROUGHPUT:-0}"
SKIP_LATENCY="${SKIP_LATENCY:-0}"
SPLIT="${SPLIT:-0}"
MM2_VERSION="${MM2_VERSION:-4.3.1}"
MM2_HOME="${MM2_HOME:-$ROOT/.cache/connect-mirror/$MM2_VERSION}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
KAFKA_HOME="${SEGMIRROR_KAFKA_HOME:-$ROOT/.cache/kafka/4.4.0}"
BIN="${SEGMIRROR:-$ROOT/target/release/segmirror}"
WORK="$BENCH_DIR/serve"
# Longest wait for the mirror to hold the source's bytes, and for it to grow at all.
CATCH_UP_S="${CATCH_UP_S:-3600}"
STALL_S="${STALL_S:-120}"
# ConsumerPerformance --timeout: the longest gap between records before the tool gives up.
PERF_TIMEOUT_MS=60000
# Longest wait, after the producer of a latency measurement stops, for the last record to arrive.
DRAIN_S=60
RECORD_BYTES=1024
TOPIC=tput
PROBE="$ROOT/tools/bench/mm2_probe.py"
WAIT="$ROOT/tools/bench/serve_probe.py"

cd "$ROOT"
# shellcheck source=tools/bench/lib.sh
source "$ROOT/tools/bench/lib.sh"
[ -d "$KAFKA_HOME/libs" ] || { echo "no Kafka jars in $KAFKA_HOME/libs (set SEGMIRROR_KAFKA_HOME)" >&2; exit 2; }
MM2_NOTE=""
if [ "$SKIP_MM2" != 1 ] && [ ! -f "$MM2_HOME/.complete" ]; then
    SKIP_MM2=1
    MM2_NOTE="MirrorMaker 2 not measured: no connect-mirror jars in $MM2_HOME (tools/bench/mm2.sh fetches them)"
fi
[ -n "${SEGMIRROR:-}" ] || cargo build --release -q --bin segmirror
"$BIN" serve --help > /dev/null || { echo "$BIN has no serve command" >&2; exit 2; }

rm -rf "$WORK"
mkdir -p "$WORK"
PIDS=()
# Only this shell's own background jobs still running (a pid of one that ended may belong to another process now);
# MirrorMaker 2 first, while the brokers it talks to still run (it does not exit without them); whatever ignores
# SIGTERM for 30 s is killed.
cleanup() {
    local live=() p running
    running=" $(jobs -p | tr '\n' ' ') "
    for p in "${PIDS[@]}"; do [[ "$running" == *" $p "* ]] && live+=("$p"); done
    [ -z "${MM2_PID:-}" ] || [[ "$running" != *" $MM2_PID "* ]] || stop_pids "$MM2_PID"
    [ "${#live[@]}" = 0 ] || stop_pids "${live[@]}"
    [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK" "${BROKER_DATA_DIRS[@]}"
}
trap cleanup EXIT
CERTS="$WORK/certs"
bench_certs "$CERTS"
TLS_SHIP=(--tls-cert "$CERTS/ship.crt" --tls-key "$CERTS/ship.key" --tls-ca "$CERTS/ca.crt")
TLS_APPLY=(--tls-cert "$CERTS/apply.crt" --tls-key "$CERTS/apply.key" --tls-ca "$CERTS/ca.crt")

# restart_broker DIR: the broker lib.sh's start_broker DIR set up, started again on its formatted log dir (the same
# JVM command line), after a promotion into that log dir. Sets BROKER_PID.
restart_broker() {
    local dir="$1"
    java -Xmx1g -Xms1g -XX:+UseG1GC -Dkafka.logs.dir="$dir" \
        -Dlog4j2.configurationFile="$ROOT/tests/kafka/broker-log4j2.properties" \
        -cp "$KAFKA_HOME/libs/*" kafka.Kafka "$dir/server.properties" >> "$dir/stdout" 2>&1 &
    BROKER_PID=$!
    PIDS+=("$BROKER_PID")
}
# start_pair DIR TOPICS SECURITY UPTO...: segmirror apply --listen and ship --connect for TOPICS (a regex) into
# DIR/mirror with the catalog DIR/catalog.sqlite and SEGMIRROR_HOME DIR/home; SECURITY is "plaintext" or "tls".
# Sets APPLY_PID and SHIP_PID.
start_pair() {
    local dir="$1" topics="$2" security="$3" port
    shift 3
    local ship_sec=(--plaintext) apply_sec=(--plaintext)
    [ "$security" = plaintext ] || { ship_sec=("${TLS_SHIP[@]}"); apply_sec=("${TLS_APPLY[@]}"); }
    port=$(free_port)
    mkdir -p "$dir"
    SEGMIRROR_HOME="$dir/home" "$BIN" apply --mirror "$dir/mirror" --catalog "$dir/catalog.sqlite" --link bench \
        --listen "127.0.0.1:$port" "${apply_sec[@]}" > "$dir/apply.out" 2>&1 &
    APPLY_PID=$!
    PIDS+=("$APPLY_PID")
    SEGMIRROR_HOME="$dir/home" "$BIN" ship --log-dir "$SRC_LOG" --topics "$topics" "$@" --link bench \
        --connect "localhost:$port" "${ship_sec[@]}" > "$dir/ship.out" 2>&1 &
    SHIP_PID=$!
    PIDS+=("$SHIP_PID")
}
# start_serve DIR: segmirror serve --plaintext over DIR/mirror, once the applier has recorded the link in the
# catalog (serve refuses an unknown link: it is retried for up to 60 s). Sets SERVE_PID and SERVE_BOOT.
start_serve() {
    local dir="$1" port i
    port=$(free_port)
    SERVE_BOOT="127.0.0.1:$port"
    for i in $(seq 60); do
        SEGMIRROR_HOME="$dir/home" "$BIN" serve --mirror "$dir/mirror" --catalog "$dir/catalog.sqlite" --link bench \
            --listen "$SERVE_BOOT" --plaintext >> "$dir/serve.out" 2>&1 &
        SERVE_PID=$!
        PIDS+=("$SERVE_PID")
        sleep 1
        kill -0 "$SERVE_PID" 2>/dev/null && return
        wait "$SERVE_PID" 2>/dev/null || true
    done
    echo "segmirror serve did not start (see $dir/serve.out):" >&2
    tail -n 20 "$dir/serve.out" >&2
    exit 1
}

# start_bucket DIR TOPICS: segmirror ship --store DIR/store (a local folder as the bucket, high-watermark) for TOPICS
# (a regex), then segmirror serve --store on the same folder with its cache in DIR/cache, retried for up to 60 s
# like start_serve (serve may refuse a store that holds nothing of the link yet). Sets SHIP_PID, SERVE_PID and
# SERVE_BOOT.
start_bucket() {
    local dir="$1" topics="$2" port i
    mkdir -p "$dir/store"
    SEGMIRROR_HOME="$dir/home" "$BIN" ship --store "$dir/store" --log-dir "$SRC_LOG" --topics "$topics" --link bench \
        --upto high-watermark --source-bootstrap "$SRC_BOOT" --upload-interval-ms "$BUCKET_UPLOAD_MS" \
        > "$dir/ship.out" 2>&1 &
    SHIP_PID=$!
    PIDS+=("$SHIP_PID")
    port=$(free_port)
    SERVE_BOOT="127.0.0.1:$port"
    for i in $(seq 60); do
        SEGMIRROR_HOME="$dir/home" "$BIN" serve --store "$dir/store" --link bench --cache-dir "$dir/cache" \
            --cache-size "$BUCKET_CACHE_MIB" --poll-interval-ms "$BUCKET_POLL_MS" --listen "$SERVE_BOOT" --plaintext \
            >> "$dir/serve.out" 2>&1 &
        SERVE_PID=$!
        PIDS+=("$SERVE_PID")
        sleep 1
        kill -0 "$SERVE_PID" 2>/dev/null && return
        wait "$SERVE_PID" 2>/dev/null || true
    done
    echo "segmirror serve --store did not start (see $dir/serve.out):" >&2
    tail -n 20 "$dir/serve.out" >&2
    exit 1
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
mkdir -p "$WORK/source" "$WORK/target"
start_broker "$WORK/source"
SRC_PID=$BROKER_PID SRC_BOOT=$BROKER_BOOTSTRAP SRC_LOG=$BROKER_LOG_DIR
start_broker "$WORK/target"
TGT_PID=$BROKER_PID TGT_BOOT=$BROKER_BOOTSTRAP TGT_LOG=$BROKER_LOG_DIR

RECORDS=$(awk -v m="$SIZE_MIB" -v r="$RECORD_BYTES" 'BEGIN { printf "%.0f", m * 1048576 / r }')
TPUT=()
LOG_BYTES=0 SAME_BYTES=- CACHE_MODE=-
if [ "$SKIP_THROUGHPUT" != 1 ]; then
    create_topic "$SRC_BOOT" "$SRC_LOG" "$TOPIC" "$PARTITIONS"
    create_topic "$TGT_BOOT" "$TGT_LOG" "$TOPIC" "$PARTITIONS"
    echo "producing $RECORDS records of $RECORD_BYTES bytes (lz4) into $TOPIC ($PARTITIONS partitions)" >&2
    java_cp 512 org.apache.kafka.tools.ProducerPerformance --topic "$TOPIC" --num-records "$RECORDS" \
        --record-size "$RECORD_BYTES" --throughput -1 --producer-props "bootstrap.servers=$SRC_BOOT" acks=all \
        linger.ms=5 batch.size=262144 compression.type=lz4 > "$WORK/producer.out" 2>&1
    LOG_BYTES=$(find "$SRC_LOG" -path "*/$TOPIC-*/*.log" -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s }')

    echo "replicating $TOPIC: segmirror ship --connect + apply --listen (plaintext, high-watermark)" >&2
    T="$WORK/tput"
    start_pair "$T" "$TOPIC" plaintext --upto high-watermark --source-bootstrap "$SRC_BOOT"
    r=$(python3 "$PROBE" wait-files "$SRC_LOG" "$T/mirror" "$TOPIC" "$CATCH_UP_S" "$STALL_S")
    read -r done_at want have <<< "$r"
    [ "$done_at" != nan ] || {
        echo "the mirror stalled at $have of $want bytes; the last lines of ship and apply:" >&2
        tail -n 15 "$T/ship.out" "$T/apply.out" >&2
        exit 1
    }
    # The last batch's install (fsync, catalog) follows the bytes reaching the file.
    sleep 2
    stop_pids "$SHIP_PID" "$APPLY_PID"
    cp "$T/catalog.sqlite" "$WORK/catalog-after-apply.sqlite"
    for f in "$T"/catalog.sqlite-*; do [ -e "$f" ] && cp "$f" "$WORK/catalog-after-apply.sqlite${f##*catalog.sqlite}"; done

    echo "promoting the mirror into the second broker's log dir (handover copy)" >&2
    stop_pids "$TGT_PID"
    "$BIN" promote --mirror "$T/mirror" --catalog "$T/catalog.sqlite" --link bench --log-dir "$TGT_LOG" \
        --target-config "$WORK/target/server.properties" --handover copy > "$WORK/promote.out" 2>&1 || {
        echo "promote failed:" >&2
        tail -n 30 "$WORK/promote.out" >&2
        exit 1
    }
    SAME_BYTES=yes
    for f in "$T/mirror/$TOPIC"-*/*.log; do
        cmp -s "$f" "$TGT_LOG/$(basename "$(dirname "$f")")/$(basename "$f")" || SAME_BYTES="no ($f differs)"
    done
    for f in "$SRC_LOG/$TOPIC"-*/*.log; do
        cmp -s "$f" "$T/mirror/$(basename "$(dirname "$f")")/$(basename "$f")" || SAME_BYTES="no (mirror != source: $f)"
    done
    restart_broker "$WORK/target"
    TGT_PID=$BROKER_PID
    # The catalog as apply left it: serve follows the link record and stops once it is promoted.
    rm -f "$T"/catalog.sqlite*
    for f in "$WORK"/catalog-after-apply.sqlite*; do cp "$f" "$T/catalog.sqlite${f##*catalog-after-apply.sqlite}"; done
    python3 "$WAIT" wait-topic "$TGT_BOOT" "$TOPIC" "$PARTITIONS" "$RECORDS" 300 > /dev/null 2>> "$WORK/wait.err" || {
        echo "the promoted broker does not serve $RECORDS records of $TOPIC (see $WORK/target/stdout)" >&2
        exit 1
    }
    start_serve "$T"
    python3 "$WAIT" wait-topic "$SERVE_BOOT" "$TOPIC" "$PARTITIONS" "$RECORDS" 120 > /dev/null 2>> "$WORK/wait.err" || {
        echo "segmirror serve does not list $RECORDS records of $TOPIC (see $T/serve.out)" >&2
        exit 1
    }

    CACHE_MODE="cold (sync + drop_caches before each run)"
    [ "$CACHE" != warm ] || CACHE_MODE="warm (CACHE=warm)"
    # On tmpfs the files are memory: nothing to drop, both sides read from RAM.
    if [ "$(stat -f -c %T "$WORK")" = tmpfs ]; then
        CACHE="tmpfs" CACHE_MODE="in memory (BENCH_DIR on tmpfs: the logs are RAM, nothing to drop)"
    fi
    # One consumer run: side, bootstrap, server pid, run number; appends
    # "side run mb mb_s records rebalance_ms fetch_ms fetch_mb_s cpu_s wall_s exit" to TPUT.
    perf_run() {
        local side="$1" boot="$2" pid="$3" run="$4" out="$WORK/perf-$1-$4.out"
        sync
        if [ "$CACHE" = cold ] && ! { echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null; then
            CACHE_MODE="warm (dropping the page cache was refused)"
        fi
        local c0 c1 t0 t1 rc=0
        c0=$(cpu_s "$pid") t0=$(date +%s.%N)
        java_cp 1024 org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$boot" --topic "$TOPIC" \
            --num-records "$RECORDS" --timeout "$PERF_TIMEOUT_MS" --group "perf-$side-$run" > "$out" 2>&1 || rc=$?
        t1=$(date +%s.%N) c1=$(cpu_s "$pid")
        [ "$rc" = 0 ] || { echo "ConsumerPerformance against $side exited $rc; its last lines:" >&2; tail -n 20 "$out" >&2; }
        TPUT+=("$side $run $(python3 "$WAIT" perf-row "$out" || true) $(awk -v a="$c0" -v b="$c1" -v s="$t0" -v e="$t1" \
            'BEGIN { printf "%.2f %.2f", b - a, e - s }') $rc")
    }
    for run in $(seq "$RUNS"); do
        echo "consumer run $run/$RUNS: serve, then the broker" >&2
        perf_run serve "$SERVE_BOOT" "$SERVE_PID" "$run"
        perf_run broker "$TGT_BOOT" "$TGT_PID" "$run"
    done
    stop_pids "$SERVE_PID"
fi

# Continuous latency: "rate side sent seen p50 p99 max loop server_cpu_s" appended to LATENCY.
LATENCY=()
if [ "$SKIP_LATENCY" != 1 ]; then
    for rate in $RATES; do
        create_topic "$SRC_BOOT" "$SRC_LOG" "lat-$rate-source"
        create_topic "$SRC_BOOT" "$SRC_LOG" "lat-$rate-mm2"
        for mode in $SM_MODES; do create_topic "$SRC_BOOT" "$SRC_LOG" "lat-$rate-$mode"; done
    done
    if [ "$SKIP_MM2" != 1 ]; then
        echo "starting MirrorMaker 2 $MM2_VERSION (source -> the second broker)" >&2
        MM2_TOPICS=""
        for rate in $RATES; do MM2_TOPICS="${MM2_TOPICS:+$MM2_TOPICS|}lat-$rate-mm2"; done
        mkdir -p "$WORK/mm2"
        # tools/bench/mm2.sh's configuration: one direction, Kafka's defaults except what a single-broker pair needs.
        cat > "$WORK/mm2/mm2.properties" <<EOF
clusters = source, target
source.bootstrap.servers = $SRC_BOOT
target.bootstrap.servers = $TGT_BOOT
source->target.enabled = true
target->source.enabled = false
source->target.topics = $MM2_TOPICS
replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
tasks.max = 1
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
EOF
        java -Xms256M -Xmx2G -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
            -Dlog4j2.configurationFile="$ROOT/tests/kafka/broker-log4j2.properties" -cp "$MM2_HOME/libs/*" \
            org.apache.kafka.connect.mirror.MirrorMaker "$WORK/mm2/mm2.properties" > "$WORK/mm2/mm2.log" 2>&1 &
        MM2_PID=$!
        PIDS+=("$MM2_PID")
        # Running once it has created every target topic (it replicates them from their start).
        for rate in $RATES; do
            python3 "$WAIT" wait-topic "$TGT_BOOT" "lat-$rate-mm2" 1 0 300 > /dev/null 2>> "$WORK/wait.err" || {
                MM2_NOTE="MirrorMaker 2 did not create its target topics within 300 s (see $WORK/mm2/mm2.log)"
                SKIP_MM2=1
                break
            }
        done
        [ "$SKIP_MM2" = 1 ] || sleep 5
    fi
    # One measurement: DIR (its outputs), TOPIC, BOOTSTRAP of the side read, rate, label, server pid or "-", and
    # for SPLIT=1 the mirror's .log of the topic (or none).
    # WARMUP_S seconds of records at the rate first (mm2_probe.py produce), read back on the side measured: the
    # topic exists there and its path runs before the first timed record; the consumer then starts after them. Appends
    # "rate label sent received p50 p99 max loop server_cpu_s mirror_p50 mirror_p99" to LATENCY.
    latency_run() {
        local dir="$1" topic="$2" boot="$3" rate="$4" label="$5" pid="$6" log="${7:-}" r waited start warm probe
        local observer="" c0=0 c1=0
        mkdir -p "$dir"
        python3 "$PROBE" produce "$SRC_BOOT" "$topic" "$rate" "$WARMUP_S" > "$dir/warm.sent"
        warm=$(cat "$dir/warm.sent")
        r=$(python3 "$WAIT" wait-topic "$boot" "$topic" 1 "$warm" 120 2>> "$dir/wait.err") || {
            echo "  $label: the $warm warm-up records did not reach $boot within 120 s (measuring anyway)" >&2
        }
        read -r waited start <<< "$r"
        [ "$start" -ge 1 ] 2>/dev/null || start=0
        echo "  $label: $warm warm-up records all readable ${waited}s after their producer's flush" >&2
        python3 "$WAIT" consume-from "$boot" "$topic" "$start" $((rate * DURATION)) $((DURATION + DRAIN_S)) \
            > "$dir/probe.out" 2>> "$dir/probe.err" &
        probe=$!
        echo "- - - - -" > "$dir/mirror.out"
        if [ "$SPLIT" = 1 ] && [ -n "$log" ]; then
            python3 "$WAIT" mirror-from "$log" "$start" $((rate * DURATION)) $((DURATION + DRAIN_S)) > "$dir/mirror.out" &
            observer=$!
        fi
        sleep 2
        [ "$pid" = - ] || c0=$(cpu_s "$pid")
        python3 "$PROBE" produce "$SRC_BOOT" "$topic" "$rate" "$DURATION" > "$dir/sent"
        wait "$probe"
        [ "$pid" = - ] || c1=$(cpu_s "$pid")
        [ -z "$observer" ] || wait "$observer"
        LATENCY+=("$rate $label $(cat "$dir/sent") $(cat "$dir/probe.out") $(
            [ "$pid" = - ] && echo - || awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }') $(
            awk '{ print $2, $3 }' "$dir/mirror.out")")
    }
    for rate in $RATES; do
        echo "latency: the source broker itself at $rate records/s for ${DURATION}s" >&2
        latency_run "$WORK/lat-$rate-source" "lat-$rate-source" "$SRC_BOOT" "$rate" source -
        if [ "$SKIP_MM2" != 1 ]; then
            echo "latency: MirrorMaker 2 at $rate records/s for ${DURATION}s" >&2
            latency_run "$WORK/lat-$rate-mm2" "lat-$rate-mm2" "$TGT_BOOT" "$rate" MirrorMaker-2 -
        fi
        for mode in $SM_MODES; do
            dir="$WORK/lat-$rate-$mode"
            if [ "$mode" = bucket ]; then
                echo "latency: ship --store -> serve --store (upload every ${BUCKET_UPLOAD_MS} ms, poll every" \
                    "${BUCKET_POLL_MS} ms) at $rate records/s for ${DURATION}s" >&2
                start_bucket "$dir" "lat-$rate-$mode"
                latency_run "$dir" "lat-$rate-$mode" "$SERVE_BOOT" "$rate" "serve-$mode" "$SERVE_PID"
                stop_pids "$SERVE_PID" "$SHIP_PID"
                continue
            fi
            echo "latency: ship -> apply -> serve ($mode) at $rate records/s for ${DURATION}s" >&2
            upto=(--upto "$mode" --source-bootstrap "$SRC_BOOT")
            start_pair "$dir" "lat-$rate-$mode" tls "${upto[@]}"
            start_serve "$dir"
            latency_run "$dir" "lat-$rate-$mode" "$SERVE_BOOT" "$rate" "serve-$mode" "$SERVE_PID" \
                "$dir/mirror/lat-$rate-$mode-0/00000000000000000000.log"
            stop_pids "$SERVE_PID" "$SHIP_PID" "$APPLY_PID"
        done
    done
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
[ "${#TPUT[@]}" = 0 ] || printf 'raw throughput row: %s\n' "${TPUT[@]}" >&2
[ "${#LATENCY[@]}" = 0 ] || printf 'raw latency row: %s\n' "${LATENCY[@]}" >&2

SKIPPED=""
[ "$SKIP_MM2" != 1 ] || [ -n "$MM2_NOTE" ] || SKIPPED="SKIP_MM2=1 "
[ "$SKIP_THROUGHPUT" != 1 ] || SKIPPED="${SKIPPED}SKIP_THROUGHPUT=1 "
[ "$SKIP_LATENCY" != 1 ] || SKIPPED="${SKIPPED}SKIP_LATENCY=1 "
[ "$SPLIT" != 1 ] || SKIPPED="${SKIPPED}SPLIT=1 "
echo
echo "segmirror serve against a stock broker, $(date -u '+%Y-%m-%d %H:%M UTC'): segmirror" \
    "$("$BIN" --version | awk '{ print $2 }'), single-node Kafka $(basename "$KAFKA_HOME") brokers"
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r)," \
    "$(free -g | awk '$1 == "Mem:" { print $2 }') GiB RAM, shared (contended); load average before/after:" \
    "$LOAD_BEFORE / $LOAD_AFTER"
BENCH_ARG=""
BUCKET_ARG=""
[[ " $SM_MODES " != *" bucket "* ]] ||
    BUCKET_ARG="BUCKET_UPLOAD_MS=$BUCKET_UPLOAD_MS BUCKET_POLL_MS=$BUCKET_POLL_MS BUCKET_CACHE_MIB=$BUCKET_CACHE_MIB "
[ "$BENCH_DIR" = "$ROOT/target/bench" ] || BENCH_ARG="BENCH_DIR=$BENCH_DIR "
echo "reproduce: ${SEGMIRROR:+SEGMIRROR=$SEGMIRROR }${BROKER_DATA_ROOT:+BROKER_DATA_ROOT=$BROKER_DATA_ROOT }PROBE_LINGER_MS=${PROBE_LINGER_MS:-0} $BENCH_ARG${SKIPPED}SIZE_MIB=$SIZE_MIB PARTITIONS=$PARTITIONS RUNS=$RUNS" \
    "CACHE=$CACHE_ARG RATES=\"$RATES\" DURATION=$DURATION WARMUP_S=$WARMUP_S SM_MODES=\"$SM_MODES\" ${BUCKET_ARG}MM2_VERSION=$MM2_VERSION tools/bench/serve.sh"
if [ "$SKIP_THROUGHPUT" != 1 ]; then
    echo
    echo "Consumer throughput: ConsumerPerformance reading $RECORDS records of $RECORD_BYTES bytes (lz4) from" \
        "$PARTITIONS partitions, $(numfmt --to=iec-i --suffix=B "$LOG_BYTES") of .log; promoted .log = mirror .log" \
        "= source .log: $SAME_BYTES; page cache: $CACHE_MODE"
    echo
    echo "| run | side | fetch MB/s | MB/s incl. group join | records | group join ms | wall s | server CPU s | exit |"
    echo "|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${TPUT[@]}" | awk '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $2, $1, $8, $4, $5, $6, $10, $9, $11 }'
    echo
    echo "| side | median fetch MB/s | median MB/s incl. join | median server CPU s | server CPU s per GiB read |"
    echo "|---|---|---|---|---|"
    median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
    declare -A MED_F MED_M MED_C
    for side in serve broker; do
        MED_F[$side]=$(printf '%s\n' "${TPUT[@]}" | awk -v s="$side" '$1 == s { print $8 }' | median)
        MED_M[$side]=$(printf '%s\n' "${TPUT[@]}" | awk -v s="$side" '$1 == s { print $4 }' | median)
        MED_C[$side]=$(printf '%s\n' "${TPUT[@]}" | awk -v s="$side" '$1 == s { print $9 }' | median)
        awk -v s="$side" -v f="${MED_F[$side]}" -v m="${MED_M[$side]}" -v c="${MED_C[$side]}" -v b="$LOG_BYTES" \
            'BEGIN { printf "| %s | %.1f | %.1f | %.2f | %.2f |\n", s, f, m, c, (b > 0 ? c / (b / 1073741824) : 0) }'
    done
    echo
    awk -v sf="${MED_F[serve]}" -v bf="${MED_F[broker]}" -v sm="${MED_M[serve]}" -v bm="${MED_M[broker]}" \
        -v sc="${MED_C[serve]}" -v bc="${MED_C[broker]}" 'BEGIN {
        printf "serve / broker: throughput %.2fx (fetch MB/s; %.2fx incl. group join), CPU %.2fx (target: >= 1.0x at <= 0.5x)\n",
            (bf > 0 ? sf / bf : 0), (bm > 0 ? sm / bm : 0), (bc > 0 ? sc / bc : 0) }'
fi
if [ "$SKIP_LATENCY" != 1 ]; then
    echo
    echo "End-to-end latency, producer send -> consumer receive (source: on the source topic itself; MirrorMaker 2:" \
        "on its target topic; serve-MODE:" \
        "ship --connect -> apply --listen over mutual TLS -> serve, ship --upto MODE; serve-bucket: ship --store ->" \
        "a local folder -> serve --store, upload every ${BUCKET_UPLOAD_MS} ms, poll every ${BUCKET_POLL_MS} ms," \
        "cache ${BUCKET_CACHE_MIB} MiB);" \
        "${DURATION}s per row"
    [ -z "$MM2_NOTE" ] || echo "$MM2_NOTE"
    echo
    echo "| rate rec/s | side | records sent / received | p50 ms | p99 ms | max ms | p99 vs MM2 | serve CPU s | to the mirror p50 / p99 ms (SPLIT=1) |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for rate in $RATES; do
        mm_p99=$(printf '%s\n' "${LATENCY[@]}" | awk -v r="$rate" '$1 == r && $2 == "MirrorMaker-2" { print $6 }')
        printf '%s\n' "${LATENCY[@]}" | awk -v r="$rate" -v m="${mm_p99:-0}" '$1 == r {
            printf "| %s | %s | %s / %s | %.1f | %.1f | %.1f | %s | %s | %s / %s |\n", $1, $2, $3, $4, $5, $6, $7,
                (m > 0 ? sprintf("%.3fx", $6 / m) : "-"), $9, $10, $11 }'
    done
fi
