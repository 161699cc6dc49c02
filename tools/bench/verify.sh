#!/usr/bin/env bash
# Benchmark: `segmirror verify` (default and --deep) against a plain sequential read of the same files
# (`cat > /dev/null`), in the same run, on a generated partition set. Prints a markdown table with wall time,
# throughput, ratio to the plain read, CPU time (user + sys) and peak RSS (from /usr/bin/time).
#
# Usage: tools/bench/verify.sh [SIZE] [PARTITIONS]     (defaults: 4GiB, 1 partition)
#   SIZE accepts the suffixes segmirror generate takes (GiB, MiB). Data goes to $BENCH_DIR (default target/bench).
#   Every measurement runs RUNS times (default 5), interleaved (cat, verify, ... then again) so that a burst of load
#   from other processes hits every command alike, and the median is reported; the page cache is warmed first so
#   all of them read from memory and the comparison is of CPU work, not of the disk.
#   The "1 core" row pins verify to one CPU (taskset): its CRC helper thread then has no core of its own, which
#   shows what the second core buys.
#   SEGMIRROR=path runs that binary instead of building target/release/segmirror (to compare two builds).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SIZE="${1:-4GiB}"
PARTITIONS="${2:-1}"
RUNS="${RUNS:-5}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
DATA="$BENCH_DIR/verify-$SIZE-$PARTITIONS"
BIN="${SEGMIRROR:-$ROOT/target/release/segmirror}"

cd "$ROOT"
[ -n "${SEGMIRROR:-}" ] || cargo build --release -q -p segmirror
if [ ! -f "$DATA/.complete" ]; then
    rm -rf "$DATA"
    echo "generating $SIZE in $PARTITIONS partition(s) into $DATA" >&2
    "$BIN" generate --out "$DATA" --bulk-bytes "$SIZE" --partitions "$PARTITIONS" --segment-bytes 1GiB >&2
    touch "$DATA/.complete"
fi
mapfile -t LOGS < <(find "$DATA" -name '*.log' | sort)
BYTES=$(cat "${LOGS[@]}" | wc -c)
cat "${LOGS[@]}" > /dev/null  # warm the page cache
"$BIN" verify "$DATA" > /dev/null || { echo "verify does not find $DATA sound" >&2; exit 1; }

NAMES=("cat > /dev/null (baseline)" "segmirror verify" "segmirror verify, 1 core" "segmirror verify --deep")
COMMANDS=(
    "cat ${LOGS[*]} > /dev/null"
    "$BIN verify $DATA > /dev/null"
    "taskset -c 0 $BIN verify $DATA > /dev/null"
    "$BIN verify --deep $DATA > /dev/null"
)
declare -a WALL CPU RSS
# busy and total CPU time of the machine (USER_HZ ticks), to tell how much other processes used during the run
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat; }
read -r BUSY_BEFORE TOTAL_BEFORE < <(cpu_ticks)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for _ in $(seq "$RUNS"); do
    for i in "${!COMMANDS[@]}"; do
        /usr/bin/time -o "$BENCH_DIR/.time" -f '%e %U %S %M' sh -c "${COMMANDS[$i]}" 2>/dev/null || true
        read -r e u s m < <(tail -n1 "$BENCH_DIR/.time")
        WALL[$i]+="$e "
        CPU[$i]+="$(awk -v u="$u" -v s="$s" 'BEGIN { print u + s }') "
        [ "$m" -gt "${RSS[$i]:-0}" ] && RSS[$i]=$m
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
read -r BUSY_AFTER TOTAL_AFTER < <(cpu_ticks)
OURS=$(echo "${CPU[*]}" | tr ' ' '\n' | awk '{ s += $1 } END { print s }')
OTHERS=$(awk -v b=$((BUSY_AFTER - BUSY_BEFORE)) -v t=$((TOTAL_AFTER - TOTAL_BEFORE)) -v o="$OURS" \
    -v hz="$(getconf CLK_TCK)" 'BEGIN { x = (b / hz - o) / (t / hz); printf "%.0f%%", (x < 0 ? 0 : x) * 100 }')

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
cat_s=$(echo "${WALL[0]}" | median)
row() { # name wall cpu rss
    awk -v n="$1" -v s="$2" -v c="$3" -v r="$4" -v b="$BYTES" -v base="$cat_s" 'BEGIN {
        printf "| %-28s | %7.2f | %7.0f | %6.2fx | %7.2f | %12.1f |\n", n, s, b / s / 1048576, base / s, c, r / 1024 }'
}
echo
echo "verify benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'): $(numfmt --to=iec-i --suffix=B "$BYTES") of .log data in" \
    "$PARTITIONS partition(s), median of $RUNS interleaved runs, warm page cache"
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r);" \
    "load average before/after: $LOAD_BEFORE / $LOAD_AFTER;" \
    "other processes used $OTHERS of the machine's CPU time during the measurements"
echo "reproduce: ${SEGMIRROR:+SEGMIRROR=$SEGMIRROR }RUNS=$RUNS tools/bench/verify.sh $SIZE $PARTITIONS"
echo
echo "| command                      | wall s  | MiB/s   | vs cat  | CPU s   | peak RSS MiB |"
echo "|------------------------------|---------|---------|---------|---------|--------------|"
for i in "${!COMMANDS[@]}"; do
    row "${NAMES[$i]}" "$(echo "${WALL[$i]}" | median)" "$(echo "${CPU[$i]}" | median)" "${RSS[$i]}"
done
