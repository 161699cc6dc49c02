#!/usr/bin/env bash
# Benchmark: `segmirror verify` (default and --deep) against a plain sequential read of the same files
# (`cat > /dev/null`), in the same run, on a generated partition set. Prints a markdown table with throughput,
# ratio to the plain read, and peak RSS (from /usr/bin/time).
#
# Usage: tools/bench/verify.sh [SIZE] [PARTITIONS]     (defaults: 4GiB, 1 partition)
#   SIZE accepts the suffixes segmirror generate takes (GiB, MiB). Data goes to $BENCH_DIR (default target/bench).
#   Every measurement runs RUNS times (default 3) and the median is reported; the page cache is warmed first so all
#   three read from memory and the comparison is of CPU work, not of the disk.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SIZE="${1:-4GiB}"
PARTITIONS="${2:-1}"
RUNS="${RUNS:-3}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
DATA="$BENCH_DIR/verify-$SIZE-$PARTITIONS"
BIN="$ROOT/target/release/segmirror"

cd "$ROOT"
cargo build --release -q -p segmirror
if [ ! -f "$DATA/.complete" ]; then
    rm -rf "$DATA"
    echo "generating $SIZE in $PARTITIONS partition(s) into $DATA" >&2
    "$BIN" generate --out "$DATA" --bulk-bytes "$SIZE" --partitions "$PARTITIONS" --segment-bytes 1GiB >&2
    touch "$DATA/.complete"
fi
mapfile -t LOGS < <(find "$DATA" -name '*.log' | sort)
BYTES=$(cat "${LOGS[@]}" | wc -c)
cat "${LOGS[@]}" > /dev/null  # warm the page cache

# median wall seconds and max RSS (KiB) of a command over RUNS runs
measure() {
    local times=() rss=0 out
    for _ in $(seq "$RUNS"); do
        /usr/bin/time -o "$BENCH_DIR/.time" -f '%e %M' "$@" > /dev/null 2>&1 || true
        out=$(tail -n1 "$BENCH_DIR/.time")
        times+=("${out% *}")
        local r="${out#* }"
        [ "$r" -gt "$rss" ] && rss="$r"
    done
    local median
    median=$(printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "$median $rss"
}

read -r cat_s cat_rss < <(measure sh -c "cat ${LOGS[*]} > /dev/null")
read -r ver_s ver_rss < <(measure "$BIN" verify "$DATA")
read -r deep_s deep_rss < <(measure "$BIN" verify --deep "$DATA")

row() { # name seconds rss
    awk -v n="$1" -v s="$2" -v r="$3" -v b="$BYTES" -v base="$cat_s" 'BEGIN {
        printf "| %-28s | %8.2f | %10.0f | %6.2fx | %8.1f |\n", n, s, b / s / 1048576, base / s, r / 1024 }'
}
echo
echo "verify benchmark: $(numfmt --to=iec "$BYTES")B of .log data in $PARTITIONS partition(s), median of $RUNS runs, warm page cache"
echo "reproduce: tools/bench/verify.sh $SIZE $PARTITIONS"
echo
echo "| command                      | seconds  | MiB/s      | vs cat  | peak RSS MiB |"
echo "|------------------------------|----------|------------|---------|----------|"
row "cat > /dev/null (baseline)" "$cat_s" "$cat_rss"
row "segmirror verify" "$ver_s" "$ver_rss"
row "segmirror verify --deep" "$deep_s" "$deep_rss"
