#!/usr/bin/env bash
# Benchmark: `segmirror serve --store` at rest over a bucket of many partitions, one or more binaries side by side
# (e.g. a build before and after a change).
#
# What it measures: the CPU the endpoint spends per second while nothing changes in the bucket, after its first
# refresh served every partition (the first look, which reads every manifest, is not counted). Nothing else runs.
#
# Per partition count N: `segmirror generate` writes a log dir of N partitions of 64 KiB each (topic `bulk`), `seed`
# ships it into a local folder store (which writes the link's change notice), the source is removed; then each
# binary in turn runs `serve --store` with the default poll interval until it answers a Kafka client's metadata
# request (`kcat -L`, every partition listed), settles SETTLE_S seconds, and is sampled over IDLE_S seconds
# (user + sys from /proc). Resident memory is the peak (VmHWM).
#
# Usage: tools/bench/serve_store_rest.sh BIN... (partition counts in PARTITIONS, default "1000 10000")
#   IDLE_S=20 SETTLE_S=5 WORK=DIR (default target/bench/serve_store_rest; removed after)
# Not a test: scripts/test-all.sh does not run it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tools/bench/lib.sh
source "$ROOT/tools/bench/lib.sh"
[ "$#" -ge 1 ] || { echo "usage: $0 BIN..." >&2; exit 2; }
BINS=("$@")
PARTITIONS=${PARTITIONS:-"1000 10000"}
IDLE_S=${IDLE_S:-20}
SETTLE_S=${SETTLE_S:-5}
WORK=${WORK:-$ROOT/target/bench/serve_store_rest}
command -v kcat > /dev/null || { echo "kcat is needed (apt-get install kcat)" >&2; exit 2; }
trap 'rm -rf "$WORK"' EXIT

ROWS=()
for n in $PARTITIONS; do
    rm -rf "$WORK"
    mkdir -p "$WORK"
    "${BINS[0]}" generate --out "$WORK/source" --bulk-bytes "$((n * 64))KiB" --partitions "$n" --no-fsync > /dev/null
    "${BINS[0]}" seed --log-dir "$WORK/source" --store "$WORK/store" --link bench > /dev/null 2>&1
    rm -rf "$WORK/source"
    for bin in "${BINS[@]}"; do
        rm -rf "$WORK/cache"
        port=$(free_port)
        "$bin" serve --store "$WORK/store" --link bench --cache-dir "$WORK/cache" --listen "127.0.0.1:$port" --plaintext \
            > "$WORK/serve.log" 2>&1 &
        pid=$!
        started=$(date +%s.%N)
        until [ "$(kcat -L -b "127.0.0.1:$port" -t bulk -m 5 2>/dev/null | grep -c 'partition ')" -ge "$n" ]; do
            kill -0 "$pid" 2> /dev/null || { tail -n 5 "$WORK/serve.log" >&2; exit 1; }
            sleep 0.5
        done
        first=$(python3 -c "import sys; print(round($(date +%s.%N) - $started, 2))")
        sleep "$SETTLE_S"
        before=$(cpu_s "$pid")
        sleep "$IDLE_S"
        after=$(cpu_s "$pid")
        rss=$(hwm_kib "$pid")
        stop_pids "$pid"
        idle=$(python3 -c "print(round(100 * ($after - $before) / $IDLE_S, 2))")
        ROWS+=("$n $bin $first $idle $((rss / 1024))")
        echo "$n partitions, $bin: first served in ${first} s, at rest ${idle} % of a core, peak RSS $((rss / 1024)) MiB" >&2
    done
done

echo
echo "serve --store at rest, $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "reproduce: PARTITIONS=\"$PARTITIONS\" IDLE_S=$IDLE_S SETTLE_S=$SETTLE_S tools/bench/serve_store_rest.sh ${BINS[*]}"
echo
echo "| partitions | binary | first served, s | at rest, % of a core | peak RSS, MiB |"
echo "|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}" | awk '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }'
