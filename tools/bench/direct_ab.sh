#!/usr/bin/env bash
# Direct tail catch-up, A/B against the disk: one source broker, one lz4 topic of SIZE_GIB in PARTITIONS partitions
# (the catch-up topic of tools/bench/mm2.sh, produced the same way), then, one after the other and ROUNDS times in
# alternating order, each timed from its processes' start to the copy being complete:
#   - for each binary in BINS: `segmirror ship` + `segmirror apply --listen` over loopback mutual TLS,
#     `--upto high-watermark --source-bootstrap` (as mm2.sh's tail row) until the mirror's .log files hold every
#     byte of the source's; CPU s of both processes;
#   - the disk's ceiling for the same bytes: `cp -r` of the topic's partition dirs + `sync`, and
#     `dd if=/dev/zero bs=1M conv=fsync` of as many bytes (one file).
# Prints a table (MiB/s, ratio to cp + sync, CPU s) and the command that reproduces it. Why: the MirrorMaker 2
# throughput target needs the direct path near the disk's speed; this shows how near, in one run (shared machine).
#
# Usage: BINS="before=/path/a after=/path/b" SIZE_GIB=2 PARTITIONS=4 ROUNDS=2 tools/bench/direct_ab.sh
# Not a test: scripts/test-all.sh does not run it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SIZE_GIB="${SIZE_GIB:-2}"
PARTITIONS="${PARTITIONS:-4}"
ROUNDS="${ROUNDS:-2}"
BINS="${BINS:-built=$ROOT/target/release/segmirror}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
KAFKA_HOME="${SEGMIRROR_KAFKA_HOME:-$ROOT/.cache/kafka/4.4.0}"
WORK="$BENCH_DIR/direct_ab"
TOPIC=catchup
PROBE="$ROOT/tools/bench/mm2_probe.py"
cd "$ROOT"
# shellcheck source=tools/bench/lib.sh
source "$ROOT/tools/bench/lib.sh"
rm -rf "$WORK"
mkdir -p "$WORK"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
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

ROWS=()
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { print b - a }'; }
row_ship() { # name bin
    local name="$1" bin="$2" dir="$WORK/tail" port start r done_at want have apply ship ok=yes
    rm -rf "$dir"
    mkdir -p "$dir"
    port=$(free_port)
    start=$(now)
    SEGMIRROR_HOME="$dir/home" "$bin" apply --mirror "$dir/mirror" --link bench --listen "127.0.0.1:$port" \
        --tls-cert "$CERTS/apply.crt" --tls-key "$CERTS/apply.key" --tls-ca "$CERTS/ca.crt" > "$dir/apply.out" 2>&1 &
    apply=$!
    PIDS+=("$apply")
    SEGMIRROR_HOME="$dir/home" "$bin" ship --log-dir "$SRC_LOG" --topics "$TOPIC" --upto high-watermark \
        --source-bootstrap "$SRC_BOOT" --link bench --connect "localhost:$port" \
        --tls-cert "$CERTS/ship.crt" --tls-key "$CERTS/ship.key" --tls-ca "$CERTS/ca.crt" > "$dir/ship.out" 2>&1 &
    ship=$!
    PIDS+=("$ship")
    r=$(python3 "$PROBE" wait-files "$SRC_LOG" "$dir/mirror" "$TOPIC" 1800 60)
    read -r done_at want have <<< "$r"
    local cpu
    cpu=$(awk -v a="$(cpu_s "$ship")" -v b="$(cpu_s "$apply")" 'BEGIN { print a + b }')
    kill -TERM "$ship" "$apply" 2>/dev/null || true
    wait "$ship" "$apply" || true
    [ "$done_at" != nan ] || { ok="stalled-at-$have-of-$want"; done_at=$(now); }
    if [ "$ok" = yes ]; then
        local f
        for f in "$SRC_LOG/$TOPIC"-*/*.log; do
            cmp -s "$f" "$dir/mirror/$(basename "$(dirname "$f")")/$(basename "$f")" || ok=differs
        done
    fi
    ROWS+=("$name $(elapsed "$start" "$done_at") $cpu $ok")
    rm -rf "$dir"
}
row_cp() {
    local start
    rm -rf "$WORK/cp"
    mkdir -p "$WORK/cp"
    start=$(now)
    cp -r "$SRC_LOG/$TOPIC"-* "$WORK/cp/"
    sync
    ROWS+=("cp-r+sync $(elapsed "$start" "$(now)") - yes")
    rm -rf "$WORK/cp"
}
row_dd() {
    local start
    start=$(now)
    dd if=/dev/zero of="$WORK/dd" bs=1M count=$((LOG_BYTES / 1048576)) conv=fsync status=none
    ROWS+=("dd-conv=fsync $(elapsed "$start" "$(now)") - yes")
    rm -f "$WORK/dd"
}
read -r -a ENTRIES <<< "$BINS"
for round in $(seq "$ROUNDS"); do
    order=("${ENTRIES[@]}")
    if [ $((round % 2)) = 0 ]; then # every other round the other way round
        order=()
        for ((i = ${#ENTRIES[@]} - 1; i >= 0; i--)); do order+=("${ENTRIES[$i]}"); done
    fi
    row_cp
    for e in "${order[@]}"; do
        echo "round $round: ${e%%=*}" >&2
        row_ship "${e%%=*}" "${e#*=}"
    done
    row_dd
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "Direct tail catch-up against the disk, $(date -u '+%Y-%m-%d %H:%M UTC'): $(numfmt --to=iec-i --suffix=B "$LOG_BYTES")" \
    "of .log in $PARTITIONS partitions (lz4), $ROUNDS rounds (order alternating)"
echo "machine: $(nproc) CPUs, kernel $(uname -r); load average before/after: $LOAD_BEFORE / $LOAD_AFTER"
echo "reproduce: BINS=\"$BINS\" SIZE_GIB=$SIZE_GIB PARTITIONS=$PARTITIONS ROUNDS=$ROUNDS tools/bench/direct_ab.sh"
echo
echo "| row | runs: wall s | median wall s | MiB/s | vs cp -r + sync | CPU s ship + apply (median) | copy = source |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}" | awk -v b="$LOG_BYTES" '
    { n = $1; walls[n] = walls[n] " " $2; c[n]++; w[n, c[n]] = $2; cpu[n, c[n]] = $3
      if (!(n in ok) || $4 != "yes") ok[n] = $4; if (!(n in seen)) { seen[n] = 1; order[++k] = n } }
    function med(n, a,   i, j, t, m, v) { m = c[n]; for (i = 1; i <= m; i++) v[i] = a[n, i]
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
      return (m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2) }
    END { base = med("cp-r+sync", w)
      for (i = 1; i <= k; i++) { n = order[i]; m = med(n, w)
        printf "| %s |%s | %.1f | %.1f | %.2fx | %s | %s |\n", n, walls[n], m, b / m / 1048576, base / m,
          (cpu[n, 1] == "-" ? "-" : sprintf("%.1f", med(n, cpu))), ok[n] } }'
