#!/usr/bin/env bash
# Benchmark: Apache MirrorMaker 2 and segmirror side by side, in one run, on one machine, from
# one source broker. Two single-node KRaft brokers (the harness's Kafka jars): the source, and MirrorMaker 2's target.
# MirrorMaker 2 (connect-mirror, fetched from Maven Central with tools/bench/mm2/pom.xml into .cache/, reused by
# later runs) runs as its dedicated driver (org.apache.kafka.connect.mirror.MirrorMaker, one JVM) with the identity
# replication policy, so the target topic has the source's name. segmirror runs as processes, as users run them.
#
# 1. Catch-up. The producer (Kafka's ProducerPerformance, 1 KiB records, acks=all, compression.type=lz4) writes
#    SIZE_GIB of records into a topic of PARTITIONS partitions first, with nothing replicating. Then, one after the
#    other, each timed from its processes' start to the copy holding everything:
#    - segmirror seed + apply + sync: the source log dir -> a local-folder store -> a mirror, then `sync` (the
#      batch catch-up, as tools/bench/catchup.sh runs it);
#    - segmirror ship + apply --listen (tail catch-up over loopback mutual TLS, `--upto high-watermark
#      --source-bootstrap`: committed records only, as MirrorMaker 2 reads) until the mirror's .log files hold
#      every byte of the source's; then the same with `--plaintext` on both sides (PLAINTEXT_ROW=0 leaves it out),
#      the like-for-like row: MirrorMaker 2 and the brokers here talk PLAINTEXT;
#    - MirrorMaker 2 from a cold start (JVM, Connect group, task start-up included) until the sum of the target
#      topic's end offsets equals the source's. MirrorMaker 2 does not keep offsets (it re-produces each record),
#      but it copies each record once in a run without failures, so the record counts compare.
#    Per side: wall time, MiB/s of source .log, CPU seconds (utime + stime, /proc/<pid>/stat or /usr/bin/time) of
#    EVERY process involved, both brokers included on both sides (the target broker idles while segmirror runs: a
#    mirror is files until promotion), over the GiB of source .log; peak RSS (VmHWM) of each process, the brokers'
#    reset before each side (clear_refs). The mirrors are compared with the source's .log files byte for byte after
#    the timings.
# 2. Continuous latency, per rate in RATES (records/s of 1 KiB, uncompressed, acks=all, linger.ms=0: a Python
#    confluent-kafka producer stamping each value with its send time) for DURATION seconds, one fresh one-partition
#    topic per side and rate (topics created before MirrorMaker 2 starts, so it replicates them from the start):
#    - MirrorMaker 2: a consumer on the target topic (assigned, no group join) records each record's receive time;
#    - segmirror per mode in SM_MODES (high-watermark = `--upto high-watermark --source-bootstrap`, log-end =
#      `--upto log-end`): ship + apply --listen as in 1, and an observer polling the mirror's .log every 1 ms and
#      parsing every complete batch down to the values: a record's time is when its batch is complete in the
#      mirror's file. That is latency TO THE MIRROR: the records are readable by consumers after promotion
#      (`segmirror promote` into a stopped broker), not while mirroring; MirrorMaker 2's are readable at once.
#    p50 / p99 / max of (arrival - send) over every record, same clock (one machine). MirrorMaker 2 keeps running
#    (idle) while segmirror is measured; segmirror's processes run only during their own measurements.
#
# Usage: tools/bench/mm2.sh
#   SIZE_GIB (default 4; decimals allowed: 0.25) of 1 KiB records for the catch-up; MM2_MAX_S (default 3600) stops
#   MirrorMaker 2's catch-up early (its row is then for the share it copied); PARTITIONS (default 4; also
#   MirrorMaker 2's tasks.max); RATES (default "1000 10000"); DURATION (default 30) seconds per latency measurement;
#   SM_MODES (default "high-watermark log-end"); MM2_PROPS (lines appended to mm2.properties, e.g. producer
#   tuning: "target.producer.batch.size = 262144"; default none: Kafka's defaults); MM2_VERSION (default 4.3.1); MM2_HOME (default
#   .cache/connect-mirror/<version>: its libs/ holds the jars); BENCH_DIR (default target/bench; the run's data is
#   removed at the end unless KEEP=1); SEGMIRROR=path runs that binary instead of building target/release/segmirror;
#   SEGMIRROR_KAFKA_HOME (default .cache/kafka/4.4.0) holds the brokers' jars. While iterating on segmirror:
#   SKIP_MM2=1 leaves MirrorMaker 2 out (no Maven fetch, no MM2 catch-up or latency rows; the ratios print "-"),
#   SKIP_SEED=1 leaves the seed + apply row out. SEAL_AB=1 runs the tail catch-up twice, first with every seal
#   reading its segment again (SEGMIRROR_SEAL_FULL_READ=1), then as built (running digests); SEAL_AB=2 the other
#   way round. PLAINTEXT_ROW=0 leaves the plaintext tail catch-up out.
# Not a test: scripts/test-all.sh does not run it, and nothing here is on the test path.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SIZE_GIB="${SIZE_GIB:-4}"
PARTITIONS="${PARTITIONS:-4}"
RATES="${RATES:-1000 10000}"
DURATION="${DURATION:-30}"
SM_MODES="${SM_MODES:-high-watermark log-end}"
MM2_VERSION="${MM2_VERSION:-4.3.1}"
MM2_HOME="${MM2_HOME:-$ROOT/.cache/connect-mirror/$MM2_VERSION}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
KAFKA_HOME="${SEGMIRROR_KAFKA_HOME:-$ROOT/.cache/kafka/4.4.0}"
BIN="${SEGMIRROR:-$ROOT/target/release/segmirror}"
WORK="$BENCH_DIR/mm2"
# Longest wait for one of segmirror's catch-ups, and for its mirror to grow at all (a stall ends the measurement).
CATCH_UP_S="${CATCH_UP_S:-3600}"
STALL_S="${STALL_S:-120}"
# Longest wait for a segmirror process to exit after SIGTERM.
STOP_S=30
# Longest MirrorMaker 2 catch-up: past it, its row is what it copied so far (share of records x source bytes) in
# that time. On a loaded 2-CPU machine it copies about 1 MiB/s, so 4 GiB would take over an hour.
MM2_MAX_S="${MM2_MAX_S:-3600}"
# Longest wait, after the producer of a latency measurement stops, for the last record to arrive.
DRAIN_S=60
RECORD_BYTES=1024
TOPIC=catchup
PROBE="$ROOT/tools/bench/mm2_probe.py"

cd "$ROOT"
# shellcheck source=tools/bench/lib.sh
source "$ROOT/tools/bench/lib.sh"
[ -d "$KAFKA_HOME/libs" ] || { echo "no Kafka jars in $KAFKA_HOME/libs (set SEGMIRROR_KAFKA_HOME)" >&2; exit 2; }
SKIP_MM2="${SKIP_MM2:-0}"
SKIP_SEED="${SKIP_SEED:-0}"
if [ "$SKIP_MM2" != 1 ] && [ ! -f "$MM2_HOME/.complete" ]; then
    echo "fetching connect-mirror $MM2_VERSION and its runtime into $MM2_HOME/libs" >&2
    rm -rf "$MM2_HOME"
    mkdir -p "$MM2_HOME"
    mvn -q -B -Dstyle.color=never -f "$ROOT/tools/bench/mm2/pom.xml" -Dmm2.version="$MM2_VERSION" \
        dependency:copy-dependencies -DoutputDirectory="$MM2_HOME/libs"
    [ -f "$MM2_HOME/libs/connect-mirror-$MM2_VERSION.jar" ] || { echo "no connect-mirror jar fetched" >&2; exit 1; }
    echo "$MM2_VERSION" > "$MM2_HOME/.complete"
fi
[ -n "${SEGMIRROR:-}" ] || cargo build --release -q -p segmirror

rm -rf "$WORK"
mkdir -p "$WORK"
export SEGMIRROR_HOME="$WORK/home"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
CERTS="$WORK/certs"
bench_certs "$CERTS"
TLS_SHIP=(--tls-cert "$CERTS/ship.crt" --tls-key "$CERTS/ship.key" --tls-ca "$CERTS/ca.crt")
TLS_APPLY=(--tls-cert "$CERTS/apply.crt" --tls-key "$CERTS/apply.key" --tls-ca "$CERTS/ca.crt")

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
mkdir -p "$WORK/source" "$WORK/target"
start_broker "$WORK/source"
SRC_PID=$BROKER_PID SRC_BOOT=$BROKER_BOOTSTRAP SRC_LOG=$BROKER_LOG_DIR
start_broker "$WORK/target"
TGT_PID=$BROKER_PID TGT_BOOT=$BROKER_BOOTSTRAP

create_topic "$SRC_BOOT" "$SRC_LOG" "$TOPIC" "$PARTITIONS"
for rate in $RATES; do
    create_topic "$SRC_BOOT" "$SRC_LOG" "lat-$rate-mm2"
    for mode in $SM_MODES; do create_topic "$SRC_BOOT" "$SRC_LOG" "lat-$rate-$mode"; done
done

RECORDS=$(awk -v g="$SIZE_GIB" -v r="$RECORD_BYTES" 'BEGIN { printf "%.0f", g * 1073741824 / r }')
echo "producing $RECORDS records of $RECORD_BYTES bytes (lz4) into $TOPIC ($PARTITIONS partitions)" >&2
java_cp 512 org.apache.kafka.tools.ProducerPerformance --topic "$TOPIC" --num-records "$RECORDS" \
    --record-size "$RECORD_BYTES" --throughput -1 --producer-props "bootstrap.servers=$SRC_BOOT" acks=all \
    linger.ms=5 batch.size=262144 compression.type=lz4 > "$WORK/producer.out" 2>&1
LOG_BYTES=$(find "$SRC_LOG" -path "*/$TOPIC-*/*.log" -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s }')
sync

# One catch-up result: "name wall_s cpu_total_s cpu_own_s src_broker_cpu_s tgt_broker_cpu_s own_peak_rss_kib
# broker_peak_rss_kib ok" appended to CATCHUP.
declare -a CATCHUP
T="$WORK/.time"
brokers_mark() { B0=("$(cpu_s "$SRC_PID")" "$(cpu_s "$TGT_PID")"); reset_hwm "$SRC_PID"; reset_hwm "$TGT_PID"; }
catchup_row() { # name wall own_cpu own_rss ok
    local s t
    s=$(awk -v a="${B0[0]}" -v b="$(cpu_s "$SRC_PID")" 'BEGIN { print b - a }')
    t=$(awk -v a="${B0[1]}" -v b="$(cpu_s "$TGT_PID")" 'BEGIN { print b - a }')
    local brss
    brss=$(printf '%s\n' "$(hwm_kib "$SRC_PID")" "$(hwm_kib "$TGT_PID")" | sort -n | tail -n1)
    CATCHUP+=("$1 $2 $(awk -v o="$3" -v s="$s" -v t="$t" 'BEGIN { print o + s + t }') $3 $s $t $4 $brss $5")
}
timed() { # out, command...: prints "wall cpu rss_kib"
    local out="$1"
    shift
    /usr/bin/time -o "$T" -f '%e %U %S %M' "$@" > "$out" 2>&1 || {
        echo "failed: $* (output in $out)" >&2
        tail -n 20 "$out" >&2
        exit 1
    }
    tail -n1 "$T" | awk '{ print $1, $2 + $3, $4 }'
}
same_logs() { # mirror dir: "yes" when every .log of the topic equals the source's
    local f
    for f in "$SRC_LOG/$TOPIC"-*/*.log; do
        cmp -s "$f" "$1/$(basename "$(dirname "$f")")/$(basename "$f")" || { echo "differs"; return; }
    done
    echo yes
}

if [ "$SKIP_SEED" != 1 ]; then
echo "catch-up: segmirror seed + apply + sync" >&2
brokers_mark
start=$(date +%s.%N)
r=$(timed "$WORK/seed.out" "$BIN" seed --log-dir "$SRC_LOG" --topics "$TOPIC" --store "$WORK/store")
read -r _ seed_cpu seed_rss <<< "$r"
r=$(timed "$WORK/apply.out" "$BIN" apply --store "$WORK/store" --mirror "$WORK/mirror-seed" \
    --catalog "$WORK/catalog.sqlite")
read -r _ apply_cpu apply_rss <<< "$r"
r=$(timed /dev/null sync)
read -r _ sync_cpu _ <<< "$r"
end=$(date +%s.%N)
catchup_row "segmirror-seed+apply+sync" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" \
    "$(awk -v a="$seed_cpu" -v b="$apply_cpu" -v c="$sync_cpu" 'BEGIN { print a + b + c }')" \
    "$(printf '%s\n' "$seed_rss" "$apply_rss" | sort -n | tail -n1)" "$(same_logs "$WORK/mirror-seed")"
rm -rf "$WORK/store" "$WORK/mirror-seed"
fi

# start_pair DIR TOPIC UPTO...: `segmirror apply --listen` and `segmirror ship --connect` for TOPIC; sets APPLY_PID
# and SHIP_PID.
# PAIR_ENV: environment assignments for both processes (none by default); PAIR_SHIP / PAIR_APPLY: their transport
# flags (mutual TLS by default).
PAIR_ENV=()
PAIR_SHIP=("${TLS_SHIP[@]}")
PAIR_APPLY=("${TLS_APPLY[@]}")
start_pair() {
    local dir="$1" topic="$2" port
    shift 2
    port=$(free_port)
    mkdir -p "$dir"
    env "${PAIR_ENV[@]}" "$BIN" apply --mirror "$dir/mirror" --link bench --listen "127.0.0.1:$port" "${PAIR_APPLY[@]}" \
        > "$dir/apply.out" 2>&1 &
    APPLY_PID=$!
    PIDS+=("$APPLY_PID")
    env "${PAIR_ENV[@]}" "$BIN" ship --log-dir "$SRC_LOG" --topics "$topic" "$@" --link bench --connect "localhost:$port" \
        "${PAIR_SHIP[@]}" > "$dir/ship.out" 2>&1 &
    SHIP_PID=$!
    PIDS+=("$SHIP_PID")
}
# A shipper that ignores SIGTERM (seen with a stalled tail catch-up) is killed after STOP_S.
stop_pair() { stop_pids "$SHIP_PID" "$APPLY_PID"; }

# tail_catchup ROW ENV...: one tail catch-up (ship + apply --listen) with ENV for both processes, as row ROW.
tail_catchup() {
    local row="$1"
    shift
    PAIR_ENV=("$@")
    echo "catch-up: segmirror ship + apply --listen ($row)" >&2
    brokers_mark
    start=$(date +%s.%N)
    start_pair "$WORK/tail" "$TOPIC" --upto high-watermark --source-bootstrap "$SRC_BOOT"
    r=$(python3 "$PROBE" wait-files "$SRC_LOG" "$WORK/tail/mirror" "$TOPIC" "$CATCH_UP_S" "$STALL_S")
    read -r done_at want have <<< "$r"
    own_cpu=$(awk -v a="$(cpu_s "$SHIP_PID")" -v b="$(cpu_s "$APPLY_PID")" 'BEGIN { print a + b }')
    own_rss=$(printf '%s\n' "$(hwm_kib "$SHIP_PID")" "$(hwm_kib "$APPLY_PID")" | sort -n | tail -n1)
    ok=yes
    if [ "$done_at" = nan ]; then
        ok="stalled:$(awk -v h="$have" -v w="$want" 'BEGIN { printf "%.1f", 100 * h / w }')%-then-no-growth-for-${STALL_S}s"
        done_at=$(date +%s.%N)
        echo "$row stalled; the last lines of ship and apply:" >&2
        tail -n 15 "$WORK/tail/ship.out" "$WORK/tail/apply.out" >&2 || true
    fi
    catchup_row "$row" "$(awk -v a="$start" -v b="$done_at" 'BEGIN { print b - a }')" "$own_cpu" "$own_rss" "$ok"
    stop_pair
    [ "$ok" != yes ] || CATCHUP[-1]="${CATCHUP[-1]% *} $(same_logs "$WORK/tail/mirror")"
    rm -rf "$WORK/tail"
    PAIR_ENV=()
}
# SEAL_AB=1: first the same catch-up with every seal reading its segment again (SEGMIRROR_SEAL_FULL_READ=1, the
# way before the running digests), each with a home of its own.
if [ "${SEAL_AB:-0}" = 1 ]; then
    tail_catchup "segmirror-ship+apply(tail,seal-full-read)" SEGMIRROR_SEAL_FULL_READ=1 SEGMIRROR_HOME="$WORK/home-full"
    tail_catchup "segmirror-ship+apply(tail)" SEGMIRROR_HOME="$WORK/home-running"
elif [ "${SEAL_AB:-0}" = 2 ]; then # the same, the other way round
    tail_catchup "segmirror-ship+apply(tail)" SEGMIRROR_HOME="$WORK/home-running"
    tail_catchup "segmirror-ship+apply(tail,seal-full-read)" SEGMIRROR_SEAL_FULL_READ=1 SEGMIRROR_HOME="$WORK/home-full"
else
    tail_catchup "segmirror-ship+apply(tail)" SEGMIRROR_HOME="$WORK/home-tls"
fi
# A home of its own: the applier's catalog there remembers the first run's mirror (now deleted), and refuses to
# continue a mirror whose installed segments are missing.
if [ "${PLAINTEXT_ROW:-1}" = 1 ]; then
    PAIR_SHIP=(--plaintext) PAIR_APPLY=(--plaintext)
    tail_catchup "segmirror-ship+apply(tail,plaintext)" SEGMIRROR_HOME="$WORK/home-plaintext"
    PAIR_SHIP=("${TLS_SHIP[@]}") PAIR_APPLY=("${TLS_APPLY[@]}")
fi

copied=0 records=$RECORDS TGT_BYTES=0 TGT_CODEC=- MM2_BYTES=0 first_at=nan done_at=nan
if [ "$SKIP_MM2" != 1 ]; then
echo "catch-up: MirrorMaker 2 $MM2_VERSION" >&2
MM2_TOPICS="$TOPIC"
for rate in $RATES; do MM2_TOPICS="$MM2_TOPICS|lat-$rate-mm2"; done
mkdir -p "$WORK/mm2"
write_mm2_properties "$WORK/mm2/mm2.properties" "$MM2_TOPICS" "${MM2_PROPS:-}"
brokers_mark
start=$(date +%s.%N)
start_mm2 "$WORK/mm2/mm2.properties" "$WORK/mm2/mm2.log"
PIDS+=("$MM2_PID")
r=$(python3 "$PROBE" wait-ends "$SRC_BOOT" "$TGT_BOOT" "$TOPIC" "$MM2_MAX_S")
read -r done_at records copied first_at <<< "$r"
ok=yes
# Stopped by MM2_MAX_S: MirrorMaker 2's row is for the part it copied (its share of the source's bytes).
[ "$copied" -ge "$records" ] || ok="partial:$(awk -v c="$copied" -v r="$records" 'BEGIN { printf "%.1f", 100 * c / r }')%-in-${MM2_MAX_S}s"
catchup_row "MirrorMaker-2" "$(awk -v a="$start" -v b="$done_at" 'BEGIN { print b - a }')" \
    "$(cpu_s "$MM2_PID")" "$(hwm_kib "$MM2_PID")" "$ok"
MM2_BYTES=$(awk -v c="$copied" -v r="$records" -v b="$LOG_BYTES" 'BEGIN { printf "%.0f", b * c / r }')
# What MirrorMaker 2 wrote on the target: the first batch's codec (attributes & 7: 0 none, 3 lz4) and the size.
TGT_LOG="$WORK/target/data"
TGT_BYTES=$(find "$TGT_LOG" -path "*/$TOPIC-*/*.log" -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s }')
TGT_CODEC=$(python3 -c 'import sys; b = open(sys.argv[1], "rb").read(23); print(["none", "gzip", "snappy", "lz4", "zstd"][int.from_bytes(b[21:23], "big") & 7] if len(b) == 23 else "?")' \
    "$TGT_LOG/$TOPIC-0/00000000000000000000.log")
fi

# Continuous latency: "rate side records p50 p99 max loop" appended to LATENCY.
declare -a LATENCY
for rate in $RATES; do
    n=$((rate * DURATION))
    if [ "$SKIP_MM2" != 1 ]; then
    echo "latency: MirrorMaker 2 at $rate records/s for ${DURATION}s" >&2
    python3 "$PROBE" consume "$TGT_BOOT" "lat-$rate-mm2" "$n" $((DURATION + DRAIN_S)) > "$WORK/lat-$rate-mm2.out" &
    probe=$!
    sleep 2
    python3 "$PROBE" produce "$SRC_BOOT" "lat-$rate-mm2" "$rate" "$DURATION" > "$WORK/lat-$rate-mm2.sent"
    wait "$probe"
    LATENCY+=("$rate MirrorMaker-2 $(cat "$WORK/lat-$rate-mm2.out") $(cat "$WORK/lat-$rate-mm2.sent")")
    fi
    for mode in $SM_MODES; do
        echo "latency: segmirror ($mode) at $rate records/s for ${DURATION}s" >&2
        upto=(--upto log-end)
        [ "$mode" = log-end ] || upto=(--upto high-watermark --source-bootstrap "$SRC_BOOT")
        dir="$WORK/lat-$rate-$mode"
        start_pair "$dir" "lat-$rate-$mode" "${upto[@]}"
        python3 "$PROBE" mirror "$dir/mirror/lat-$rate-$mode-0/00000000000000000000.log" "$n" \
            $((DURATION + DRAIN_S)) > "$dir/probe.out" &
        probe=$!
        sleep 2
        python3 "$PROBE" produce "$SRC_BOOT" "lat-$rate-$mode" "$rate" "$DURATION" > "$dir/sent"
        wait "$probe"
        stop_pair
        LATENCY+=("$rate segmirror-$mode $(cat "$dir/probe.out") $(cat "$dir/sent")")
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
printf 'raw catch-up row: %s\n' "${CATCHUP[@]}" >&2

SKIPPED=""
[ "$SKIP_MM2" != 1 ] || SKIPPED="SKIP_MM2=1 "
[ "$SKIP_SEED" != 1 ] || SKIPPED="${SKIPPED}SKIP_SEED=1 "
[ "${SEAL_AB:-0}" = 0 ] || SKIPPED="${SKIPPED}SEAL_AB=$SEAL_AB "
[ "${PLAINTEXT_ROW:-1}" = 1 ] || SKIPPED="${SKIPPED}PLAINTEXT_ROW=0 "
MM2_ROW=$(printf '%s\n' "${CATCHUP[@]}" | awk '$1 == "MirrorMaker-2"')
echo
echo "MirrorMaker 2 side by side, $(date -u '+%Y-%m-%d %H:%M UTC'): MirrorMaker 2 $MM2_VERSION (dedicated" \
    "driver, identity replication policy, tasks.max=$PARTITIONS) and segmirror $("$BIN" --version | awk '{ print $2 }')" \
    "between two single-node Kafka $(basename "$KAFKA_HOME") brokers"
echo "catch-up topic: $(numfmt --to=iec-i --suffix=B "$LOG_BYTES") of .log in $PARTITIONS partitions" \
    "($RECORDS records of $RECORD_BYTES bytes, lz4); MirrorMaker 2 copied $copied of $records records," \
    "its target .log: $(numfmt --to=iec-i --suffix=B "$TGT_BYTES") ($TGT_CODEC)"
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r)," \
    "$(free -g | awk '$1 == "Mem:" { print $2 }') GiB RAM; load average before/after: $LOAD_BEFORE / $LOAD_AFTER"
echo "reproduce: ${SEGMIRROR:+SEGMIRROR=$SEGMIRROR }${SKIPPED}SIZE_GIB=$SIZE_GIB PARTITIONS=$PARTITIONS RATES=\"$RATES\"" \
    "DURATION=$DURATION MM2_MAX_S=$MM2_MAX_S SM_MODES=\"$SM_MODES\" MM2_VERSION=$MM2_VERSION${MM2_PROPS:+ MM2_PROPS=\"$MM2_PROPS\"} tools/bench/mm2.sh"
echo
echo "Catch-up (CPU: every process, both brokers included on both sides; ratios: segmirror / MirrorMaker 2)"
echo
echo "| side | wall s | MiB/s | throughput vs MM2 | CPU s/GiB, all | CPU vs MM2 | CPU s: mirroring / src broker / tgt broker | peak RSS MiB: mirroring / brokers | copy = source |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${CATCHUP[@]}" | awk -v b="$LOG_BYTES" -v mb="$MM2_BYTES" -v mm="$MM2_ROW" 'BEGIN {
        split(mm, m, " "); m_rate = (m[2] > 0 ? mb / m[2] : 0); m_cpu = (mb > 0 ? m[3] / (mb / 1073741824) : 0) }
    $9 ~ /^stalled/ { # no throughput or cost per GiB of a copy that did not finish; see the last column
      printf "| %s | %.1f | - | - | - | - | %.1f / %.1f / %.1f | %.0f / %.0f | %s |\n", $1, $2, $4, $5, $6,
        $7 / 1024, $8 / 1024, $9; next }
    { by = ($1 == "MirrorMaker-2" ? mb : b); rate = ($2 > 0 ? by / $2 : 0)
      cpu = (by > 0 ? sprintf("%.1f", $3 / (by / 1073741824)) : "-")
      tr = (m_rate > 0 ? sprintf("%.2fx", rate / m_rate) : "-"); cr = (m_cpu > 0 && by > 0 ? sprintf("%.3fx", cpu / m_cpu) : "-")
      printf "| %s | %.1f | %.1f | %s | %s | %s | %.1f / %.1f / %.1f | %.0f / %.0f | %s |\n",
        $1, $2, rate / 1048576, tr, cpu, cr, $4, $5, $6, $7 / 1024, $8 / 1024, $9 }'
awk -v s="$start" -v f="$first_at" -v d="$done_at" -v b="$MM2_BYTES" 'BEGIN {
    if (f == "nan" || d == "nan") exit
    printf "MirrorMaker 2 start-up (process start to the first record on the target): %.1f s; from then on %.1f MiB/s\n",
        f - s, (d > f ? b / (d - f) / 1048576 : 0) }'
echo
echo "Continuous latency, producer send -> MirrorMaker 2: consumer receive on the target topic;" \
    "segmirror: the batch complete in the MIRROR's .log (readable by consumers after promotion, not before)"
echo
echo "| rate rec/s | side | records sent / seen | p50 ms | p99 ms | max ms | p99 vs MM2 | probe loop ms |"
echo "|---|---|---|---|---|---|---|---|"
for rate in $RATES; do
    mm_p99=$(printf '%s\n' "${LATENCY[@]}" | awk -v r="$rate" '$1 == r && $2 == "MirrorMaker-2" { print $5 }')
    printf '%s\n' "${LATENCY[@]}" | awk -v r="$rate" -v m="$mm_p99" '$1 == r {
        printf "| %s | %s | %s / %s | %.1f | %.1f | %.1f | %.3fx | %.2f |\n", $1, $2, $8, $3, $4, $5, $6,
            (m > 0 ? $5 / m : 0), $7 }'
done
