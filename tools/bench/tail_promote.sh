#!/usr/bin/env bash
# `segmirror promote --handover rename` of a tail-fed mirror, from what the tail appender kept ("kept") and, on the
# same data, from a state file without it ("walk": what a mirror an older appender wrote gets, and what every
# promotion of a tailed mirror did before the appender kept anything).
#
# Usage: tools/bench/tail_promote.sh [SIZES] (default "40 4096": MiB, each size in PARTITIONS partitions)
#   PARTITIONS=8   partitions of the topic
#   RUNS=1         runs per size and mode (a fresh fixture each: a handover moves the mirror's files)
#   WORK=DIR       where fixtures go (default target/bench/tail_promote; one fixture at a time, deleted after)
#   DROP_CACHES=1  drop the page cache before each promotion (root only), as a failover after a restart meets it
#   OPEN_TXN=0     1: each partition ends with a transaction left open (four batches of one transactional
#                  producer), which promotion aborts: from the appender's tally ("kept"), or found by a walk;
#                  commit: the same four batches then their commit marker, after another transaction of the
#                  producer committed just before them (with CUT=2 the cut lands inside the last transaction and
#                  its marker follows the cut: decided by the appender's record of the producer's last closed
#                  transaction; a build without it reads the producer back from the cut, to the earlier marker);
#                  commit-only: without the earlier transaction (a build without that record reads back to the
#                  segment's base); commit-after-roll: the four batches end a sealed segment; the active one holds
#                  their commit marker, another committed transaction of the producer and two data batches (with
#                  CUT=7 the cut lands inside the four, the producer's first marker after it in the later segment:
#                  decided by the sealed segment's record; a build without that rule reads back to the sealed
#                  segment's base); commit-twice: the four batches, their commit, one more transaction of the
#                  producer and its commit, then two data batches, all in the active segment (with CUT=7 the cut
#                  lands inside the four with two of the producer's markers after it: decided by the closed log; a
#                  build without it reads back to the segment's base); commit-twice-roll: the same, then the segment
#                  sealed and two data batches in the next (with CUT=9 the cut lands inside the four in the sealed
#                  segment: decided by the segment log the seal wrote; a build without it reads back to the sealed
#                  segment's base)
#   CUT=           N: promote with `--consistent-cut` at the max timestamp of partition 0's Nth batch before its
#                  last (one ms per offset in this data: every partition is cut about as far from its end)
#   BASELINE=PATH  also promote the same fixture (with what was kept) with this binary ("baseline": e.g. a build
#                  before a change)
#
# The fixture is written by the tail appender itself (an ignored test of the applier,
# `promote::tests_tail_kept::bench_fixture`: 16 KiB batches fed in 1 MiB chunks through `TailAppender`, 1 GiB
# segments sealed as the shipper seals them, the last one active; every batch in the target's epoch, so nothing is
# restamped, as in the measured failover), with a stopped target log dir beside it. Promotion is the release
# binary, timed with /usr/bin/time (wall, user + sys CPU).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SIZES=${1:-"40 4096"}
PARTITIONS=${PARTITIONS:-8}
RUNS=${RUNS:-1}
WORK=${WORK:-$ROOT/target/bench/tail_promote}
DROP_CACHES=${DROP_CACHES:-1}
OPEN_TXN=${OPEN_TXN:-0}
CUT=${CUT:-}
BASELINE=${BASELINE:-}

cd "$ROOT"
# shellcheck source=tools/bench/lib.sh
source "$ROOT/tools/bench/lib.sh"
cargo build --release -q -p segmirror
# The fixture writer: the applier's test binary in release (its path from cargo's JSON messages).
FIXTURE=$(cargo test --release -q -p segmirror-applier --lib --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "segmirror_applier":
        print(m["executable"])')
SEGMIRROR=$ROOT/target/release/segmirror

echo "command: PARTITIONS=$PARTITIONS RUNS=$RUNS OPEN_TXN=$OPEN_TXN CUT=$CUT BASELINE=$BASELINE" \
    "tools/bench/tail_promote.sh \"$SIZES\""
echo
echo "| size | partitions | mode | run | wall s | CPU s | batches restamped | transactions aborted | offsets left behind |"
echo "|---|---|---|---|---|---|---|---|---|"
MODES="kept walk"
[ -n "$BASELINE" ] && MODES="kept walk baseline"
for mib in $SIZES; do
    for run in $(seq 1 "$RUNS"); do
        for mode in $MODES; do
            rm -rf "$WORK"
            mkdir -p "$WORK"
            forget=0
            [ "$mode" = walk ] && forget=1
            bin=$SEGMIRROR
            [ "$mode" = baseline ] && bin=$BASELINE
            SEGMIRROR_BENCH_DIR=$WORK SEGMIRROR_BENCH_MIB=$mib SEGMIRROR_BENCH_PARTITIONS=$PARTITIONS \
                SEGMIRROR_BENCH_FORGET_KEPT=$forget SEGMIRROR_BENCH_OPEN_TXN=$OPEN_TXN \
                "$FIXTURE" promote::tests_tail_kept::bench_fixture --ignored --exact -q >/dev/null
            CUT_ARGS=()
            [ -n "$CUT" ] && CUT_ARGS=(--consistent-cut "$(cut_timestamp "$WORK/mirror/orders-0" "$CUT")")
            promoted=$(cold_promote "$WORK" "$bin" --mirror "$WORK/mirror" \
                --log-dir "$WORK/target" --catalog "$WORK/catalog.sqlite" --handover rename "${CUT_ARGS[@]}")
            read -r wall cpu restamped <<< "$promoted"
            read -r aborted left <<< "$(python3 -c 'import json, sys
ps = json.load(open(sys.argv[1]))["partitions"]
print(sum(len(p.get("transactions_aborted", [])) for p in ps),
      sum((p.get("consistent_cut") or {}).get("left_offsets", 0) for p in ps))' "$WORK/report.json")"
            echo "| $mib MiB | $PARTITIONS | $mode | $run | $wall | $cpu | $restamped | $aborted | $left |"
        done
    done
done
rm -rf "$WORK"
