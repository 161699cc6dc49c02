#!/usr/bin/env bash
# Benchmark: `segmirror promote --handover rename` of a mirror of many small partitions, on a filesystem of the
# caller's choosing, one or more binaries interleaved (e.g. a build before and after a change).
#
# The fixture is what `tools/bench/partitions.sh` leaves with KEEP=1 PROMOTE=0 (BENCH_DIR on the filesystem to
# measure): the mirror and catalog of one path (`partitions-N/direct`, or `bucket`) and a stopped target log dir
# (`partitions-N/template`: the same N partitions at the same leader epoch, nothing to restamp). The catalog names
# its mirror root by path, so the runs happen in place: a pristine copy is kept beside the fixture
# (`partitions-N/orig`, made by the first run) and restored into the fixture's paths before each run, then
# `sync`ed and, when permitted, the page cache dropped; then `promote` is timed (wall, user and sys seconds,
# /usr/bin/time) and the read requests the fixture's block device completed meanwhile are counted. Each binary
# runs RUNS times, alternately. The generated source (`partitions-N/src`) is removed to
# leave room.
#
# Why the filesystem matters: promotion creates, renames and removes some ten files per partition, and how long
# that takes is the filesystem's (a journaled ext4 commits them in batches; an ext4 without a journal searches
# longer for free inodes after mass deletions). A loop-mounted image gives a filesystem of known kind on any
# machine:
#   truncate -s 8G /work/ext4.img && mkfs.ext4 -q -F /work/ext4.img && mount -o loop /work/ext4.img /mnt/e4
#   SEGMIRROR=target/release/segmirror KEEP=1 PROMOTE=0 PATHS=direct BENCH_DIR=/mnt/e4/bench \
#       tools/bench/partitions.sh 10000
#
# Usage: FIXTURE=/mnt/e4/bench/partitions-10000 tools/bench/promote_partitions.sh BIN...
#   PATH_NAME (default direct): which of the fixture's mirrors; RUNS (default 2); DROP_CACHES (default 1): 0 leaves
#   the page cache as the restore left it (warm: what a failover of a mirror an applier was writing meets), 1 drops
#   it (cold: every directory, inode and file tail read from the disk).
# Not a test: scripts/test-all.sh does not run it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=tools/bench/lib.sh
source "$ROOT/tools/bench/lib.sh"
FIXTURE="${FIXTURE:?FIXTURE=partitions-N dir kept by partitions.sh (KEEP=1 PROMOTE=0)}"
PATH_NAME="${PATH_NAME:-direct}"
RUNS="${RUNS:-2}"
[ "$#" -ge 1 ] || { echo "usage: $0 BIN..." >&2; exit 2; }
BINS=("$@")
N=$(find "$FIXTURE/template" -mindepth 1 -maxdepth 1 -type d | wc -l)
ORIG="$FIXTURE/orig"
RUN_TARGET="$FIXTURE/target"
# Read requests the fixture's block device completed (/proc/diskstats, field 4): with the page cache dropped, what
# the promotion read from the disk, one request per run of contiguous blocks.
DEVICE=$(basename "$(df --output=source "$FIXTURE" | tail -n 1)")
disk_reads() { awk -v d="$DEVICE" '$3 == d { r = $4 } END { print (r == "" ? "-" : r) }' /proc/diskstats; }

rm -rf "$FIXTURE/src"
if [ ! -d "$ORIG" ]; then
    mkdir -p "$ORIG"
    cp -a "$FIXTURE/$PATH_NAME" "$ORIG/$PATH_NAME"
fi

reset_run() {
    rm -rf "${FIXTURE:?}/$PATH_NAME" "$RUN_TARGET"
    cp -a "$ORIG/$PATH_NAME" "$FIXTURE/$PATH_NAME"
    cp -a "$FIXTURE/template" "$RUN_TARGET"
    if [ "${DROP_CACHES:-1}" = 0 ]; then sync; else drop_caches; fi
}

ROWS=()
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for run in $(seq 1 "$RUNS"); do
    for bin in "${BINS[@]}"; do
        reset_run
        reads_before=$(disk_reads)
        /usr/bin/time -o "$FIXTURE/time.out" -f "%e %U %S" "$bin" promote --mirror "$FIXTURE/$PATH_NAME/mirror" \
            --log-dir "$RUN_TARGET" --catalog "$FIXTURE/$PATH_NAME/catalog.sqlite" \
            --force --allow-retention-delete --handover rename > "$FIXTURE/last.out" 2>&1 ||
            { tail -n 5 "$FIXTURE/last.out" >&2; exit 1; }
        reads_after=$(disk_reads)
        reads=$(awk -v a="$reads_before" -v b="$reads_after" 'BEGIN { if (a == "-" || b == "-") print "-"; else print b - a }')
        out="$(tail -n 1 "$FIXTURE/time.out") $reads"
        echo "run $run $bin: $out" >&2
        ROWS+=("$bin $run $out")
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
reset_run

echo
echo "promote --handover rename of $N partitions ($PATH_NAME-fed mirror), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "filesystem: $(df -T "$FIXTURE" | awk 'NR == 2 { print $1, $2 }'); load average before/after: $LOAD_BEFORE / $LOAD_AFTER"
echo "page cache: $([ "${DROP_CACHES:-1}" = 0 ] && echo "warm (as the restore left it)" || echo "dropped before each run")"
echo "reproduce: FIXTURE=$FIXTURE PATH_NAME=$PATH_NAME RUNS=$RUNS DROP_CACHES=${DROP_CACHES:-1} tools/bench/promote_partitions.sh ${BINS[*]}"
echo
echo "| binary | run | wall s | user s | sys s | disk read requests ($DEVICE) |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}" | awk '{ printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6 }'
echo
echo "| binary | median wall s |"
echo "|---|---|"
for bin in "${BINS[@]}"; do
    printf '%s\n' "${ROWS[@]}" | awk -v b="$bin" '$1 == b { print $3 }' | sort -n |
        awk -v b="$bin" '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "| %s | %.2f |\n", b, m }'
done
