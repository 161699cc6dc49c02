#!/usr/bin/env bash
# Where the direct tail catch-up spends its CPU: the topic of tools/bench/direct_ab.sh (SIZE_GIB of 1 KiB lz4
# records in PARTITIONS partitions, one source broker), then, for each binary in BINS, one catch-up (`ship` +
# `apply --listen` over loopback mutual TLS, `--upto high-watermark --source-bootstrap`) with each process under
# `perf record` (user and kernel time of that process only: perf_event_paranoid 2 is enough). Prints, per binary
# and side, the CPU seconds and per GiB, and the hottest symbols (flat: release builds have no frame pointers).
# Why: the direct path's CPU per GiB is what limits it; this says which functions to cut, and the A/B of
# direct_ab.sh says by how much they were cut.
#
# Usage: BINS="before=/path/a after=/path/b" SIZE_GIB=1 PARTITIONS=4 tools/bench/direct_profile.sh
# The perf data stay in $PROFILE_OUT (default target/bench/direct_profile) for `perf report -i`.
# Not a test: scripts/test-all.sh does not run it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SIZE_GIB="${SIZE_GIB:-1}"
PARTITIONS="${PARTITIONS:-4}"
BINS="${BINS:-built=$ROOT/target/release/segmirror}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
KAFKA_HOME="${SEGMIRROR_KAFKA_HOME:-$ROOT/.cache/kafka/4.4.0}"
PROFILE_OUT="${PROFILE_OUT:-$BENCH_DIR/direct_profile}"
TOP="${TOP:-25}"
WORK="$BENCH_DIR/direct_profile_work"
TOPIC=catchup
PROBE="$ROOT/tools/bench/mm2_probe.py"
cd "$ROOT"
# shellcheck source=tools/bench/lib.sh
source "$ROOT/tools/bench/lib.sh"
rm -rf "$WORK"
mkdir -p "$WORK" "$PROFILE_OUT"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
CERTS="$WORK/certs"
bench_certs "$CERTS"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
start_broker "$WORK/source"
SRC_BOOT=$BROKER_BOOTSTRAP SRC_LOG=$BROKER_LOG_DIR
create_topic "$SRC_BOOT" "$SRC_LOG" "$TOPIC" "$PARTITIONS"
RECORDS=$(awk -v g="$SIZE_GIB" 'BEGIN { printf "%.0f", g * 1048576 }')
echo "producing $RECORDS records of 1 KiB (lz4) into $TOPIC ($PARTITIONS partitions)" >&2
java_cp 512 org.apache.kafka.tools.ProducerPerformance --topic "$TOPIC" --num-records "$RECORDS" \
    --record-size 1024 --throughput -1 --producer-props "bootstrap.servers=$SRC_BOOT" acks=all \
    linger.ms=5 batch.size=262144 compression.type=lz4 > "$WORK/producer.out" 2>&1
LOG_BYTES=$(find "$SRC_LOG" -path "*/$TOPIC-*/*.log" -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s }')
sync

# The pid of the process perf runs (its only child).
child_of() { local c i; for i in $(seq 100); do c=$(pgrep -P "$1" | head -1) && [ -n "$c" ] && { echo "$c"; return; }; sleep 0.02; done; }
REPORT=()
read -r -a ENTRIES <<< "$BINS"
for e in "${ENTRIES[@]}"; do
    name="${e%%=*}" bin="${e#*=}" dir="$WORK/tail"
    rm -rf "$dir"
    mkdir -p "$dir"
    port=$(free_port)
    SEGMIRROR_HOME="$dir/home" perf record -q -F 999 -o "$PROFILE_OUT/$name-apply.data" -- "$bin" apply \
        --mirror "$dir/mirror" --link bench --listen "127.0.0.1:$port" \
        --tls-cert "$CERTS/apply.crt" --tls-key "$CERTS/apply.key" --tls-ca "$CERTS/ca.crt" > "$dir/apply.out" 2>&1 &
    perf_apply=$!
    PIDS+=("$perf_apply")
    SEGMIRROR_HOME="$dir/home" perf record -q -F 999 -o "$PROFILE_OUT/$name-ship.data" -- "$bin" ship \
        --log-dir "$SRC_LOG" --topics "$TOPIC" --upto high-watermark \
        --source-bootstrap "$SRC_BOOT" --link bench --connect "localhost:$port" \
        --tls-cert "$CERTS/ship.crt" --tls-key "$CERTS/ship.key" --tls-ca "$CERTS/ca.crt" > "$dir/ship.out" 2>&1 &
    perf_ship=$!
    PIDS+=("$perf_ship")
    apply=$(child_of "$perf_apply") ship=$(child_of "$perf_ship")
    start=$(date +%s.%N)
    r=$(python3 "$PROBE" wait-files "$SRC_LOG" "$dir/mirror" "$TOPIC" 1800 60)
    read -r done_at _ _ <<< "$r"
    cpu_ship=$(cpu_s "$ship") cpu_apply=$(cpu_s "$apply")
    kill -TERM "$ship" "$apply" 2>/dev/null || true
    wait "$perf_ship" "$perf_apply" || true
    REPORT+=("$name: wall $(awk -v a="$start" -v b="$done_at" 'BEGIN { printf "%.1f", b - a }') s;" \
        "CPU s ship $cpu_ship apply $cpu_apply; per GiB: $(awk -v s="$cpu_ship" -v a="$cpu_apply" -v b="$LOG_BYTES" \
        'BEGIN { g = b / 1073741824; printf "ship %.2f apply %.2f total %.2f", s / g, a / g, (s + a) / g }')")
    rm -rf "$dir"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "Direct tail catch-up profile, $(date -u '+%Y-%m-%d %H:%M UTC'): $(numfmt --to=iec-i --suffix=B "$LOG_BYTES") of .log" \
    "in $PARTITIONS partitions (lz4); load average before/after: $LOAD_BEFORE / $LOAD_AFTER"
echo "reproduce: BINS=\"$BINS\" SIZE_GIB=$SIZE_GIB PARTITIONS=$PARTITIONS tools/bench/direct_profile.sh"
printf '%s\n' "${REPORT[@]}"
for e in "${ENTRIES[@]}"; do
    for side in ship apply; do
        echo
        echo "== ${e%%=*} $side: top $TOP symbols (% of the process's samples)"
        # To a file first: `head` closing the pipe would end the script (pipefail) before the next report.
        perf report -q -i "$PROFILE_OUT/${e%%=*}-$side.data" --no-children --sort dso,sym 2>/dev/null \
            > "$PROFILE_OUT/${e%%=*}-$side.txt" || true
        grep -v '^$' "$PROFILE_OUT/${e%%=*}-$side.txt" | sed -n "1,${TOP}p"
    done
done
