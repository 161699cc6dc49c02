#!/usr/bin/env bash
# Benchmark: catch-up of a generated topic, log dir -> local-folder store -> mirror
# (`segmirror seed && segmirror apply && sync`), against `cp -r` of the same partition dirs into a folder and on
# into a second folder, then `sync`, in the same run. Both sides write the data twice and end with a `sync`, so
# both are measured to the same point: every byte on disk. segmirror additionally checks every batch CRC on both
# sides, computes SHA-256 and CRC-32C of every object and verifies them on download, and fsyncs what it installs.
#
# After each segmirror measurement a rerun of `seed` with nothing new is timed as well (outside the catch-up time):
# with `--memory` (a binary that has it) the rerun reads no segment.
#
# With --small-batches (many small partitions) the topic is written in one-record batches of ~930
# bytes (`generate --records-per-batch 1 --value-bytes 860`), and `segmirror verify` of the source log dir is timed
# as well against `cat` of the same files (every file of the partition dirs, what verify reads), both from a warm
# page cache, interleaved, so that the comparison is of CPU work: e.g. `tools/bench/catchup.sh 512MiB 200
# --small-batches`. `verify` of the partition dirs named one by one (verified one after the other, as every log dir
# was before `verify` ran partitions side by side) is timed beside it.
#
# Promote phase (PROMOTE=0 skips it): after the catch-up runs, the mirror of the last run is promoted
# (`segmirror promote --force`) into a fresh copy of a broker-shaped target log dir (generated once: topic `bulk`
# with as many partitions, leader epoch $PROMOTE_EPOCH, default 3, so that every batch (the source's are epoch 0) is
# restamped, as a source's higher epochs are; PROMOTE_EPOCH=0 promotes into the source's epoch: nothing to restamp,
# and a rename handover walks no segment), RUNS times, against `cp -r` of the mirror's partition dirs into a folder +
# `sync` in the same run, each from a cold page cache (the catalog is restored from a copy taken after apply before each run). PROMOTE_COMPARE=path also times
# that binary's promote (e.g. a build of main) interleaved with the others; PROMOTE_PARALLEL=N passes --parallel N
# (to binaries that have it). PROMOTE_HANDOVER=copy|rename|auto passes --handover to $SEGMIRROR's promote and to
# PROMOTE_COMPARE's if it has the flag; with rename or auto the mirror is restored from a copy kept
# beside it before each run (untimed, then the page cache is dropped as for the others), since a handover takes the
# mirror's files. CATCHUP=0 skips the catch-up measurements (one untimed seed + apply makes the mirror).
#
# Usage: tools/bench/catchup.sh [SIZE] [PARTITIONS] [--small-batches]     (defaults: 4GiB, 8 partitions)
#   SIZE takes the suffixes segmirror generate takes (GiB, MiB). Data goes to $BENCH_DIR (default target/bench);
#   the generated topic is kept (marker file) and reused by later runs with the same SIZE and PARTITIONS.
#   SEGMENT_BYTES (default: generate's, Kafka's 1GiB) sets the topic's segment.bytes.
#   SEGMIRROR=path runs that binary instead of building target/release/segmirror (to compare two builds).
#   Every measurement runs RUNS times (default 3), the copy and segmirror alternately, and the median is reported.
#   Before each measurement the outputs of the previous one are removed, dirty pages are written back and, when
#   permitted (root), the page cache is dropped, so both start from cold source files; when dropping is refused
#   the source is read once instead, so both start from a warm page cache (the output says which). Before that it
#   waits for the CPUs to be idle (see wait_idle), so that the measurement starts right after the reset: on a VM
#   whose free memory is handed back to the host (virtio-balloon free page reporting, about two seconds after it
#   is freed), memory the guest touches first after that costs a host fault per page, which would otherwise make
#   both sides measure the host's page faults. The mirror is compared with the source byte for byte at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SIZE="${1:-4GiB}"
PARTITIONS="${2:-8}"
RUNS="${RUNS:-3}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
SEGMENT_BYTES="${SEGMENT_BYTES:-}"
SMALL=""
case "${3:-}" in
    --small-batches) SMALL=1 ;;
    "") ;;
    *) echo "unknown option: $3 (expected --small-batches)" >&2; exit 2 ;;
esac
GEN_ARGS=()
[ -z "$SMALL" ] || GEN_ARGS=(--records-per-batch 1 --value-bytes 860)
WORK="$BENCH_DIR/catchup-$SIZE-$PARTITIONS${SEGMENT_BYTES:+-seg$SEGMENT_BYTES}${SMALL:+-small}"
SRC="$WORK/src"
BIN="${SEGMIRROR:-$ROOT/target/release/segmirror}"

cd "$ROOT"
[ -n "${SEGMIRROR:-}" ] || cargo build --release -q -p segmirror
mkdir -p "$WORK"
if [ ! -f "$WORK/.complete" ]; then
    rm -rf "$SRC"
    echo "generating $SIZE in $PARTITIONS partition(s) into $SRC" >&2
    "$BIN" generate --out "$SRC" --bulk-bytes "$SIZE" --partitions "$PARTITIONS" \
        ${SEGMENT_BYTES:+--segment-bytes "$SEGMENT_BYTES"} "${GEN_ARGS[@]}" --no-fsync >&2
    sync
    touch "$WORK/.complete"
fi
mapfile -t PARTS < <(find "$SRC" -mindepth 1 -maxdepth 1 -type d | sort)
BYTES=$(du -sb --apparent-size "${PARTS[@]}" | awk '{ s += $1 } END { printf "%.0f\n", s }')
LOG_BYTES=$(find "${PARTS[@]}" -name '*.log' -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }')

COPY_A="$WORK/copy-a" COPY_B="$WORK/copy-b"
STORE="$WORK/store" MIRROR="$WORK/mirror" CATALOG="$WORK/catalog.sqlite"
MEMORY="$WORK/seed-memory.json"
MEMORY_ARGS=()
if "$BIN" seed --help | grep -q -- '--memory'; then MEMORY_ARGS=(--memory "$MEMORY"); fi
T="$WORK/.time"
CACHE_MODE="cold (page cache dropped before each measurement)"
reset() {
    rm -rf "$COPY_A" "$COPY_B" "$STORE" "$MIRROR" "$CATALOG" "$CATALOG"-* "$MEMORY"
    sync
    if ! { echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null; then
        CACHE_MODE="warm (dropping the page cache was refused; the source was read once before each measurement)"
        find "${PARTS[@]}" -type f -exec cat {} + > /dev/null
    fi
}
# Waits (at most IDLE_WAIT seconds, default 600) until the CPUs were at least 90% idle over 3 seconds: other work on
# the machine (a compiler) slows the CPU-bound side far more than the I/O-bound copy. Records when it gave up.
BUSY_RUNS=0
cpu_idle_pct() {
    local a b
    a=($(head -n1 /proc/stat))
    sleep 3
    b=($(head -n1 /proc/stat))
    local total=0 i
    for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
    echo $(( (b[4] - a[4] + b[5] - a[5]) * 100 / (total > 0 ? total : 1) ))
}
wait_idle() {
    local deadline=$(( $(date +%s) + ${IDLE_WAIT:-600} ))
    while [ "$(cpu_idle_pct)" -lt 90 ]; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            BUSY_RUNS=$((BUSY_RUNS + 1))
            echo "  the machine stayed busy; measuring anyway" >&2
            return
        fi
    done
}
# Runs a command under /usr/bin/time; appends "wall cpu rss_kib" to the named array.
timed() {
    local into="$1" out="$2"
    shift 2
    /usr/bin/time -o "$T" -f '%e %U %S %M' "$@" > "$out" 2>&1 || {
        echo "failed: $* (output in $out)" >&2
        tail -n 20 "$out" >&2
        exit 1
    }
    local e u s m
    read -r e u s m < <(tail -n1 "$T")
    eval "$into+=(\"$e $(awk -v u="$u" -v s="$s" 'BEGIN { print u + s }') $m\")"
}

declare -a COPY SEED APPLY SYNC WHOLE NOOP
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
CATCHUP="${CATCHUP:-1}"
PROMOTE="${PROMOTE:-1}"
PROMOTE_EPOCH="${PROMOTE_EPOCH:-3}"
if [ "$CATCHUP" = 0 ] && [ -f "$WORK/.mirror-complete" ] && [ -d "$MIRROR" ]; then
    echo "catch-up not measured (CATCHUP=0): the mirror of an earlier CATCHUP=0 run is reused" >&2
elif [ "$CATCHUP" = 0 ]; then
    echo "catch-up not measured (CATCHUP=0): one untimed seed + apply" >&2
    reset
    "$BIN" seed --log-dir "$SRC" --store "$STORE" > "$WORK/seed.out" 2>&1
    "$BIN" apply --store "$STORE" --mirror "$MIRROR" --catalog "$CATALOG" > "$WORK/apply.out" 2>&1
    sync
    touch "$WORK/.mirror-complete"
fi
[ "$CATCHUP" = 0 ] || rm -f "$WORK/.mirror-complete"
for run in $(seq "$([ "$CATCHUP" = 0 ] && echo 0 || echo "$RUNS")"); do
    echo "run $run/$RUNS" >&2
    wait_idle
    reset
    timed COPY /dev/null sh -c "mkdir '$COPY_A' && cp -r ${PARTS[*]} '$COPY_A/' && cp -r '$COPY_A' '$COPY_B' && sync"
    wait_idle
    reset
    start=$(date +%s.%N)
    timed SEED "$WORK/seed.out" "$BIN" seed --log-dir "$SRC" --store "$STORE" "${MEMORY_ARGS[@]}"
    timed APPLY "$WORK/apply.out" "$BIN" apply --store "$STORE" --mirror "$MIRROR" --catalog "$CATALOG"
    timed SYNC /dev/null sync
    end=$(date +%s.%N)
    cpu=$(printf '%s\n' "${SEED[-1]}" "${APPLY[-1]}" "${SYNC[-1]}" | awk '{ c += $2 } END { print c }')
    rss=$(printf '%s\n' "${SEED[-1]}" "${APPLY[-1]}" | awk '$3 > m { m = $3 } END { print m }')
    WHOLE+=("$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }') $cpu $rss")
    timed NOOP "$WORK/noop.out" "$BIN" seed --log-dir "$SRC" --store "$STORE" "${MEMORY_ARGS[@]}"
done

# --small-batches: verify of the source log dir against cat of the same files, warm page cache, interleaved.
declare -a CAT VERIFY VERIFY_ONE
if [ -n "$SMALL" ]; then
    "$BIN" verify "$SRC" > "$WORK/verify.out" || { echo "verify does not find $SRC sound" >&2; exit 1; }
    mapfile -t FILES < <(find "${PARTS[@]}" -type f | sort)
    for run in $(seq "$RUNS"); do
        echo "verify run $run/$RUNS" >&2
        cat "${FILES[@]}" > /dev/null
        wait_idle
        timed CAT /dev/null sh -c 'cat "$@" > /dev/null' cat "${FILES[@]}"
        wait_idle
        timed VERIFY "$WORK/verify.out" "$BIN" verify "$SRC"
        # The partition dirs named one by one are verified one after the other (the path before `verify` ran
        # partitions side by side).
        timed VERIFY_ONE /dev/null "$BIN" verify "${PARTS[@]}"
    done
fi

# Promote phase: see the header.
declare -a PCOPY PROMOTED PROMOTED_CMP
PROMOTE_TEMPLATE="$WORK/promote-template" PROMOTE_TARGET="$WORK/promote-target" PROMOTE_COPY="$WORK/promote-copy"
PROMOTE_CATALOG="$WORK/promote-catalog.sqlite" CATALOG_AFTER_APPLY="$WORK/catalog-after-apply.sqlite"
MIRROR_BYTES=0
promote_args() { # binary
    local args=(promote --mirror "$MIRROR" --log-dir "$PROMOTE_TARGET" --catalog "$PROMOTE_CATALOG" --force
        --allow-retention-delete)
    if [ -n "${PROMOTE_HANDOVER:-}" ] && { [ "$1" = "$BIN" ] || "$1" promote --help | grep -q -- '--handover'; }; then
        args+=(--handover "$PROMOTE_HANDOVER")
    fi
    if [ -n "${PROMOTE_PARALLEL:-}" ] && "$1" promote --help | grep -q -- '--parallel'; then
        args+=(--parallel "$PROMOTE_PARALLEL")
    fi
    printf '%s\n' "${args[@]}"
}
MIRROR_PRISTINE="$WORK/mirror-pristine"
handing_over() { [ "${PROMOTE_HANDOVER:-copy}" != copy ]; }
promote_reset() {
    rm -rf "$PROMOTE_TARGET" "$PROMOTE_COPY" "$PROMOTE_CATALOG" "$PROMOTE_CATALOG"-*
    if handing_over; then
        rm -rf "$MIRROR"
        cp -a "$MIRROR_PRISTINE" "$MIRROR"
    fi
    cp -a "$PROMOTE_TEMPLATE" "$PROMOTE_TARGET"
    cp "$CATALOG_AFTER_APPLY" "$PROMOTE_CATALOG"
    sync
    if ! { echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null; then
        find "$MIRROR" -type f -exec cat {} + > /dev/null
    fi
}
timed_promote() { # array, binary, output
    local args
    mapfile -t args < <(promote_args "$2")
    timed "$1" "$3" sh -c '"$0" "$@" && sync' "$2" "${args[@]}"
}
if [ "$PROMOTE" != 0 ]; then
    # The catalog as apply left it (promotion marks partitions promoted; each run starts from this copy).
    rm -f "$CATALOG_AFTER_APPLY"
    sqlite3 "$CATALOG" ".backup '$CATALOG_AFTER_APPLY'" 2>/dev/null || cp "$CATALOG" "$CATALOG_AFTER_APPLY"
    rm -rf "$PROMOTE_TEMPLATE"
    "$BIN" generate --out "$PROMOTE_TEMPLATE" --bulk-bytes 1KiB --partitions "${#PARTS[@]}" --seed 1 --no-fsync \
        > /dev/null 2>&1
    for d in "$PROMOTE_TEMPLATE"/bulk-*; do printf '0\n1\n%s 0\n' "$PROMOTE_EPOCH" > "$d/leader-epoch-checkpoint"; done
    mapfile -t MIRROR_PARTS < <(find "$MIRROR" -mindepth 1 -maxdepth 1 -type d -name 'bulk-*' | sort)
    MIRROR_BYTES=$(du -sb --apparent-size "${MIRROR_PARTS[@]}" | awk '{ s += $1 } END { printf "%.0f\n", s }')
    SIZES_OF="$MIRROR"
    if handing_over; then
        rm -rf "$MIRROR_PRISTINE"
        cp -a "$MIRROR" "$MIRROR_PRISTINE"
        SIZES_OF="$MIRROR_PRISTINE"
    fi
    for run in $(seq "$RUNS"); do
        echo "promote run $run/$RUNS" >&2
        wait_idle
        promote_reset
        timed PCOPY /dev/null sh -c "mkdir '$PROMOTE_COPY' && cp -r ${MIRROR_PARTS[*]} '$PROMOTE_COPY/' && sync"
        if [ -n "${PROMOTE_COMPARE:-}" ]; then
            wait_idle
            promote_reset
            timed_promote PROMOTED_CMP "$PROMOTE_COMPARE" "$WORK/promote-compare.out"
        fi
        wait_idle
        promote_reset
        timed_promote PROMOTED "$BIN" "$WORK/promote.out"
        # The promoted partitions hold the mirror's records: every .log as long as the mirror's.
        for part in "${MIRROR_PARTS[@]}"; do
            for f in "$SIZES_OF/$(basename "$part")"/*.log; do
                [ "$(stat -c %s "$f")" = "$(stat -c %s "$PROMOTE_TARGET/$(basename "$part")/$(basename "$f")")" ] || {
                    echo "promoted copy differs in size: $f" >&2
                    exit 1
                }
            done
        done
    done
    if handing_over; then
        rm -rf "$MIRROR"
        mv "$MIRROR_PRISTINE" "$MIRROR"
    fi
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# The mirror must hold the source's bytes: every .log, .index, .timeindex compared (outside the timings).
for part in "${PARTS[@]}"; do
    for f in "$part"/*.log "$part"/*.index "$part"/*.timeindex; do
        cmp -s "$f" "$MIRROR/$(basename "$part")/$(basename "$f")" || { echo "mirror differs: $f" >&2; exit 1; }
    done
done

median() { # field number, then "wall cpu rss" lines on stdin
    awk -v f="$1" '{ print $f }' | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}
col() { printf '%s\n' "${@:2}" | median "$1"; }
copy_s=$(col 1 "${COPY[@]}" 2>/dev/null || true)
base_s=$copy_s
row() { # name, then the runs
    local name="$1"
    shift
    local wall cpu rss
    wall=$(col 1 "$@") cpu=$(col 2 "$@") rss=$(printf '%s\n' "$@" | awk '$3 > m { m = $3 } END { print m }')
    awk -v n="$name" -v s="$wall" -v c="$cpu" -v r="$rss" -v b="$BYTES" -v base="$base_s" 'BEGIN {
        if (s < 0.005) { printf "| %-40s | %6.2f | %6s | %7s | %6.2f | %8.1f |\n", n, s, "-", "-", c, r / 1024; exit }
        printf "| %-40s | %6.2f | %6.0f | %6.2fx | %6.2f | %8.1f |\n", n, s, b / s / 1048576, base / s, c, r / 1024 }'
}
echo
echo "catch-up benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'): $(numfmt --to=iec-i --suffix=B "$BYTES") in" \
    "${#PARTS[@]} partition dir(s) ($(numfmt --to=iec-i --suffix=B "$LOG_BYTES") of .log), median of $RUNS runs;" \
    "page cache $CACHE_MODE"
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r)," \
    "$(df -T "$WORK" | awk 'NR == 2 { print $2 }') on $(df "$WORK" | awk 'NR == 2 { print $1 }');" \
    "load average before/after: $LOAD_BEFORE / $LOAD_AFTER; measurements started on a busy machine: $BUSY_RUNS"
echo "reproduce: ${SEGMENT_BYTES:+SEGMENT_BYTES=$SEGMENT_BYTES }${SEGMIRROR:+SEGMIRROR=$SEGMIRROR }RUNS=$RUNS" \
    "tools/bench/catchup.sh $SIZE $PARTITIONS${SMALL:+ --small-batches}"
if [ -n "$SMALL" ]; then
    echo "one-record batches of ~930 bytes (generate --records-per-batch 1 --value-bytes 860)," \
        "$(awk -v b="$LOG_BYTES" -v p="${#PARTS[@]}" 'BEGIN { printf "%.1f MiB of .log per partition", b / p / 1048576 }')"
fi
if [ "$CATCHUP" != 0 ]; then
echo
echo "| command                                  | wall s | MiB/s  | vs copy | CPU s  | peak RSS MiB |"
echo "|------------------------------------------|--------|--------|---------|--------|--------------|"
row "cp -r, cp -r, sync (baseline)" "${COPY[@]}"
row "segmirror seed + apply + sync" "${WHOLE[@]}"
row "  segmirror seed" "${SEED[@]}"
row "  segmirror apply" "${APPLY[@]}"
row "  sync" "${SYNC[@]}"
row "segmirror seed, no-op rerun${MEMORY_ARGS:+ (--memory)}" "${NOOP[@]}"
fi
if [ -n "$SMALL" ]; then
    base_s=$(col 1 "${CAT[@]}")
    row "cat of the source files (warm; baseline)" "${CAT[@]}"
    row "segmirror verify of the source (warm)" "${VERIFY[@]}"
    row "  same, partitions one at a time" "${VERIFY_ONE[@]}"
fi
walls() { printf '%s\n' "$@" | awk '{ printf "%s ", $1 }'; }
if [ "$CATCHUP" != 0 ]; then
    echo
    echo "every run, wall s: copy $(walls "${COPY[@]}")| segmirror $(walls "${WHOLE[@]}")| seed $(walls "${SEED[@]}")| apply $(walls "${APPLY[@]}")| no-op seed $(walls "${NOOP[@]}")${SMALL:+| cat $(walls "${CAT[@]}")| verify $(walls "${VERIFY[@]}")| one at a time $(walls "${VERIFY_ONE[@]}")}"
fi
if [ "$PROMOTE" != 0 ]; then
    echo
    echo "promote: the mirror ($(numfmt --to=iec-i --suffix=B "$MIRROR_BYTES") in ${#MIRROR_PARTS[@]} partition dir(s)) into a" \
        "fresh target log dir at leader epoch $PROMOTE_EPOCH ($([ "$PROMOTE_EPOCH" = 0 ] && echo "no batch restamped" || echo "every batch restamped")), median of $RUNS runs${PROMOTE_PARALLEL:+, --parallel $PROMOTE_PARALLEL}${PROMOTE_HANDOVER:+, --handover $PROMOTE_HANDOVER}"
    echo "reproduce: ${SEGMIRROR:+SEGMIRROR=$SEGMIRROR }${PROMOTE_COMPARE:+PROMOTE_COMPARE=$PROMOTE_COMPARE }${PROMOTE_PARALLEL:+PROMOTE_PARALLEL=$PROMOTE_PARALLEL }${PROMOTE_HANDOVER:+PROMOTE_HANDOVER=$PROMOTE_HANDOVER }PROMOTE_EPOCH=$PROMOTE_EPOCH CATCHUP=$CATCHUP RUNS=$RUNS" \
        "tools/bench/catchup.sh $SIZE $PARTITIONS"
    echo
    BYTES="$MIRROR_BYTES" base_s=$(col 1 "${PCOPY[@]}")
    echo "| command                                  | wall s | MiB/s  | vs copy | CPU s  | peak RSS MiB |"
    echo "|------------------------------------------|--------|--------|---------|--------|--------------|"
    row "cp -r mirror partitions, sync (baseline)" "${PCOPY[@]}"
    row "$(basename "$BIN") promote${PROMOTE_HANDOVER:+ --handover $PROMOTE_HANDOVER} + sync" "${PROMOTED[@]}"
    if [ -n "${PROMOTE_COMPARE:-}" ]; then
        cmp_args=$(promote_args "$PROMOTE_COMPARE" | grep -A1 -- '--handover' | tail -1 || true)
        row "$(basename "$PROMOTE_COMPARE") promote${cmp_args:+ --handover $cmp_args} + sync" "${PROMOTED_CMP[@]}"
        # The A/B this run is for: the compared binary's wall time over $SEGMIRROR's (> 1: $SEGMIRROR faster).
        awk -v a="$(col 1 "${PROMOTED_CMP[@]}")" -v b="$(col 1 "${PROMOTED[@]}")" -v n="$(basename "$BIN")" \
            -v m="$(basename "$PROMOTE_COMPARE")" 'BEGIN { if (b > 0) printf "\n%s promote is %.2fx %s'"'"'s speed (median wall %.2f s vs %.2f s)\n", n, a / b, m, b, a }'
    fi
    echo
    echo "every run, wall s: copy $(walls "${PCOPY[@]}")| promote $(walls "${PROMOTED[@]}")${PROMOTE_COMPARE:+| compare $(walls "${PROMOTED_CMP[@]}")}"
fi
