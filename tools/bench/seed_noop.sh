#!/usr/bin/env bash
# Benchmark: a no-op `segmirror seed` rerun (nothing new at the source since the last seed) against a generated
# topic whose partitions are one active segment each, the case a rerun cannot judge from a directory listing. Each
# build is timed twice over: as an operator runs it (no flag: the build's default, which for a build with a default
# seed memory is the data directory's) and with `--memory FILE` (when the build has the flag). For each, one untimed
# seed fills a fresh local-folder store, then RUNS reruns are timed with a warm page cache (the source just read) and
# RUNS with a cold one (dropped before each, when permitted), interleaved. Every rerun's JSON report is checked:
# nothing shipped, every partition complete; the bytes of source `.log` it read are the report's `log_bytes_scanned`
# plus `tail_check_bytes` (the seed memory's bounded check; 0 in builds without one).
#
# Usage: tools/bench/seed_noop.sh [SIZE] [PARTITIONS]     (defaults: 1GiB, 8 partitions)
#   SIZE takes the suffixes segmirror generate takes (GiB, MiB); the topic is generated once into $BENCH_DIR
#   (default target/bench) and reused by later runs with the same SIZE and PARTITIONS, then left alone for 3 s so
#   that its files are older than the seed memory's racy margin (a file written within it is scanned again).
#   SEGMIRROR=path times that binary (default: target/release/segmirror, built first); BEFORE=path also times
#   another build (e.g. one of main before a change) the same way, interleaved. RUNS (default 5). CLEAN=1 removes
#   the generated topic and the stores at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SIZE="${1:-1GiB}"
PARTITIONS="${2:-8}"
RUNS="${RUNS:-5}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
WORK="$BENCH_DIR/seed-noop-$SIZE-$PARTITIONS"
SRC="$WORK/src"
BIN="${SEGMIRROR:-$ROOT/target/release/segmirror}"
cd "$ROOT"
[ -n "${SEGMIRROR:-}" ] || cargo build --release -q --bin segmirror
mkdir -p "$WORK"
if [ ! -f "$WORK/.complete" ]; then
    rm -rf "$SRC"
    echo "generating $SIZE in $PARTITIONS partition(s) into $SRC" >&2
    "$BIN" generate --out "$SRC" --bulk-bytes "$SIZE" --partitions "$PARTITIONS" --no-fsync >&2
    sync
    touch "$WORK/.complete"
fi
sleep 3
LOG_BYTES=$(find "$SRC" -name '*.log' -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }')
ACTIVE=$(find "$SRC" -mindepth 1 -maxdepth 1 -type d | wc -l)

CACHE_NOTE="cold: page cache dropped before each rerun"
drop_cache() {
    sync
    if ! { echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null; then
        CACHE_NOTE="cold runs NOT cold: dropping the page cache was refused"
    fi
}
T="$WORK/.time"
# rerun LABEL BIN ARGS...: one timed no-op rerun; appends "wall cpu bytes_read" to the array named LABEL.
rerun() {
    local into="$1" bin="$2"
    shift 2
    /usr/bin/time -o "$T" -f '%e %U %S' "$bin" seed --log-dir "$SRC" --store "$STORE" --json "$@" \
        > "$WORK/rerun.json" 2> "$WORK/rerun.err" || {
        echo "failed: $bin seed $* (see $WORK/rerun.err)" >&2
        tail -n 20 "$WORK/rerun.err" >&2
        exit 1
    }
    local read_bytes
    read_bytes=$(python3 - "$WORK/rerun.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
parts = report["partitions"]
bad = [p for p in parts if p["status"]["status"] != "complete" or p["segments_shipped"] or p["bytes_uploaded"]]
if bad:
    sys.exit(f"not a no-op: {bad[0]}")
print(sum(p.get("log_bytes_scanned", 0) + p.get("tail_check_bytes", 0) for p in parts))
EOF
)
    local e u s
    read -r e u s < <(tail -n1 "$T")
    eval "$into+=(\"$e $(awk -v u="$u" -v s="$s" 'BEGIN { print u + s }') $read_bytes\")"
}

declare -a LABELS=()
declare -A CMDS=()
add_case() { # label, binary, extra args...
    LABELS+=("$1")
    CMDS["$1"]="${*:2}"
}
for build in ${BEFORE:+before} after; do
    bin="$BIN"
    [ "$build" = after ] || bin="$BEFORE"
    add_case "$build, no flag" "$bin"
    if "$bin" seed --help | grep -q -- '--memory'; then
        add_case "$build, --memory FILE" "$bin" --memory "$WORK/memory-$build.json"
    fi
done

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for i in "${!LABELS[@]}"; do
    label="${LABELS[$i]}"
    read -r -a cmd <<< "${CMDS[$label]}"
    STORE="$WORK/store-$i"
    export SEGMIRROR_HOME="$WORK/home-$i"
    rm -rf "$STORE" "$SEGMIRROR_HOME" "$WORK"/memory-*.json
    echo "$label: first seed (untimed)" >&2
    "${cmd[0]}" seed --log-dir "$SRC" --store "$STORE" "${cmd[@]:1}" > /dev/null 2>&1
    declare -a "WARM_$i=()" "COLD_$i=()"
    for run in $(seq "$RUNS"); do
        rerun "WARM_$i" "${cmd[@]}"
        drop_cache
        rerun "COLD_$i" "${cmd[@]}"
    done
    rm -rf "$STORE" # a full copy of the topic: one at a time on the disk
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
col() { printf '%s\n' "${@:2}" | awk -v f="$1" '{ print $f }' | median; }
range() { printf '%s\n' "$@" | awk '{ print $1 }' | sort -g | awk 'NR == 1 { a = $1 } { b = $1 } END { printf "%s–%s", a, b }'; }
echo
echo "no-op seed rerun, $(date -u '+%Y-%m-%d %H:%M UTC'): $(numfmt --to=iec-i --suffix=B "$LOG_BYTES") of .log in" \
    "$ACTIVE partition(s), one active segment each; median of $RUNS runs per cell ($CACHE_NOTE)"
echo "machine: $(nproc) CPUs, $(df -T "$WORK" | awk 'NR == 2 { print $2 }'); load average before/after: $LOAD_BEFORE / $LOAD_AFTER"
echo "reproduce: ${BEFORE:+BEFORE=$BEFORE }${SEGMIRROR:+SEGMIRROR=$SEGMIRROR }RUNS=$RUNS tools/bench/seed_noop.sh $SIZE $PARTITIONS"
echo
echo "| build, flags | warm s (min–max) | cold s (min–max) | CPU s (warm) | .log bytes read per rerun |"
echo "|---|---|---|---|---|"
for i in "${!LABELS[@]}"; do
    declare -n warm="WARM_$i" cold="COLD_$i"
    printf '| %s | %s (%s) | %s (%s) | %s | %s |\n' "${LABELS[$i]}" \
        "$(col 1 "${warm[@]}")" "$(range "${warm[@]}")" "$(col 1 "${cold[@]}")" "$(range "${cold[@]}")" \
        "$(col 2 "${warm[@]}")" "$(numfmt --to=iec-i --suffix=B "$(col 3 "${warm[@]}")")"
    unset -n warm cold
done
if [ "${CLEAN:-0}" = 1 ]; then
    rm -rf "$WORK"
fi
