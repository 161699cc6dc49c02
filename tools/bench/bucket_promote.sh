#!/usr/bin/env bash
# `segmirror promote --handover rename` of a bucket-fed mirror of a live broker, with the installs' record of each
# segment's transactions ("recorded") and, on a copy of the same mirror, with that record cleared from the catalog
# ("walk": what a catalog written before installs recorded it gets, and what every such promotion did before: the
# walk over every batch of each active segment to find open transactions).
#
# Usage: tools/bench/bucket_promote.sh [SIZES] (default "40 4096": MiB, each size in PARTITIONS partitions)
#   PARTITIONS=8   partitions of the topic
#   RUNS=1         runs per size (a fresh mirror each: a handover moves the mirror's files)
#   WORK=DIR       where fixtures go (default target/bench/bucket_promote; deleted after)
#   DROP_CACHES=1  drop the page cache before each promotion (root only), as a failover after a restart meets it
#   SEGMIRROR=PATH the binary (default: a release build of this tree)
#   OPEN_TXN=0     1: each partition ends with a transaction left open (`generate --open-transaction`), which
#                  promotion aborts; commit-only: the same transaction then its commit marker
#                  (`generate --committed-transaction`: with CUT=2 the cut lands inside it and its marker follows
#                  the cut, the producer's only one in the segment); commit-twice: then one more transaction of
#                  the producer and its commit, then two plain batches (`--committed-again`: with CUT=7 the cut
#                  lands inside the first transaction with two of the producer's markers after it: decided by the
#                  install's segment log; a build without it reads back to the segment's base)
#   CUT=           N: promote with `--consistent-cut` at the max timestamp of partition 0's Nth batch before its
#                  last (one ms per batch in generated data: every partition is cut about as far from its end)
#   BASELINE=PATH  also promote a third copy of the same mirror with this binary ("baseline": e.g. a build before a
#                  change; it reads the same catalog)
#
# Per size and run: `segmirror generate --running` writes a source log dir as a live broker has it (one active
# segment per partition, preallocated indexes, no log-end producer snapshot), `segmirror seed` ships it into a local
# folder store, `segmirror apply` installs it into a mirror (the source and the store are removed once used, so a
# size needs about twice its bytes of free disk); the mirror and catalog are copied for the walk mode; a generated
# stopped target log dir holds the same topic (another topic id, same partitions, epoch 0: nothing restamped). Then
# each mode: `sync`, page cache dropped, promotion timed by /usr/bin/time (wall, user + sys CPU).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SIZES=${1:-"40 4096"}
PARTITIONS=${PARTITIONS:-8}
RUNS=${RUNS:-1}
WORK=${WORK:-$ROOT/target/bench/bucket_promote}
DROP_CACHES=${DROP_CACHES:-1}
OPEN_TXN=${OPEN_TXN:-0}
BASELINE=${BASELINE:-}
CUT=${CUT:-}

cd "$ROOT"
# shellcheck source=tools/bench/lib.sh
source "$ROOT/tools/bench/lib.sh"
if [ -z "${SEGMIRROR:-}" ]; then
    cargo build --release -q --bin segmirror
    SEGMIRROR=$ROOT/target/release/segmirror
fi
trap 'rm -rf "$WORK"' EXIT

echo "command: SEGMIRROR=$SEGMIRROR PARTITIONS=$PARTITIONS RUNS=$RUNS OPEN_TXN=$OPEN_TXN CUT=$CUT BASELINE=$BASELINE" \
    "tools/bench/bucket_promote.sh \"$SIZES\""
echo
echo "| size | partitions | mode | run | wall s | CPU s | batches restamped | transactions aborted | offsets left behind |"
echo "|---|---|---|---|---|---|---|---|---|"
OPEN_ARGS=()
[ "$OPEN_TXN" = 1 ] && OPEN_ARGS=(--open-transaction)
[ "$OPEN_TXN" = commit-only ] && OPEN_ARGS=(--committed-transaction)
[ "$OPEN_TXN" = commit-twice ] && OPEN_ARGS=(--committed-transaction --committed-again)
MODES="recorded walk"
[ -n "$BASELINE" ] && MODES="recorded walk baseline"
for mib in $SIZES; do
    for run in $(seq 1 "$RUNS"); do
        rm -rf "$WORK"
        mkdir -p "$WORK"
        "$SEGMIRROR" generate --out "$WORK/source" --bulk-bytes "${mib}MiB" --partitions "$PARTITIONS" --running \
            "${OPEN_ARGS[@]}" > /dev/null
        "$SEGMIRROR" seed --log-dir "$WORK/source" --store "$WORK/store" --link bench > /dev/null 2>&1
        rm -rf "$WORK/source"
        "$SEGMIRROR" apply --store "$WORK/store" --mirror "$WORK/mirror" --catalog "$WORK/catalog.sqlite" \
            --link bench > /dev/null 2>&1
        rm -rf "$WORK/store"
        # The walk mode's mirror: a copy, moved into place (a catalog belongs to its mirror root's path) after the
        # recorded mode's promotion handed the original over.
        cp -a "$WORK/mirror" "$WORK/mirror-walk"
        cp -a "$WORK/catalog.sqlite" "$WORK/catalog-walk.sqlite"
        if [ -n "$BASELINE" ]; then
            cp -a "$WORK/mirror" "$WORK/mirror-baseline"
            cp -a "$WORK/catalog.sqlite" "$WORK/catalog-baseline.sqlite"
        fi
        "$SEGMIRROR" generate --out "$WORK/template" --bulk-bytes "$((PARTITIONS * 1024))" \
            --partitions "$PARTITIONS" --seed 1 > /dev/null
        CUT_ARGS=()
        if [ -n "$CUT" ]; then
            part0=$(find "$WORK/mirror" -maxdepth 1 -name '*-0' -type d | head -n 1)
            CUT_ARGS=(--consistent-cut "$(cut_timestamp "$part0" "$CUT")")
        fi
        for mode in $MODES; do
            bin=$SEGMIRROR
            if [ "$mode" = baseline ]; then
                bin=$BASELINE
                rm -rf "$WORK/mirror"
                mv "$WORK/mirror-baseline" "$WORK/mirror"
                mv "$WORK/catalog-baseline.sqlite" "$WORK/catalog.sqlite"
                # Each record as a build before closings were recorded wrote it (such a build reads a record with
                # them as unknown, and walks).
                python3 -c 'import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE segments SET txn_ends = substr(txn_ends, 1, instr(txn_ends, ?1) - 1) WHERE instr(txn_ends, ?1) > 0",
          (";m:",))
c.commit()' "$WORK/catalog.sqlite"
            fi
            if [ "$mode" = walk ]; then
                rm -rf "$WORK/mirror"
                mv "$WORK/mirror-walk" "$WORK/mirror"
                mv "$WORK/catalog-walk.sqlite" "$WORK/catalog.sqlite"
                python3 -c 'import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("UPDATE segments SET txn_ends = NULL")
c.commit()' "$WORK/catalog.sqlite"
            fi
            rm -rf "$WORK/target"
            cp -a "$WORK/template" "$WORK/target"
            promoted=$(cold_promote "$WORK" "$bin" --mirror "$WORK/mirror" \
                --log-dir "$WORK/target" --catalog "$WORK/catalog.sqlite" --handover rename --force \
                --allow-retention-delete "${CUT_ARGS[@]}")
            read -r wall cpu restamped <<< "$promoted"
            read -r aborted left <<< "$(python3 -c 'import json, sys
ps = json.load(open(sys.argv[1]))["partitions"]
print(sum(len(p.get("transactions_aborted", [])) for p in ps),
      sum((p.get("consistent_cut") or {}).get("left_offsets", 0) for p in ps))' "$WORK/report.json")"
            echo "| $mib MiB | $PARTITIONS | $mode | $run | $wall | $cpu | $restamped | $aborted | $left |"
        done
    done
done
