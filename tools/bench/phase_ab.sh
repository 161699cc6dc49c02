#!/usr/bin/env bash
# Interleaved A/B of one catch-up phase between segmirror binaries (issue 12): the same work, the binaries taking
# turns round after round, so that the machine's drift (shared host, page cache, the file system's recently freed
# inodes) falls on all of them alike. Prints, per binary, the median wall and CPU seconds and every run.
#
# Usage: tools/bench/phase_ab.sh PHASE ROUNDS BINARY...
#   PHASE apply:   `segmirror apply` of the store into an empty mirror, then `sync`; before each run the mirror and
#                  catalog are removed, the page cache dropped and the store read once (as right after a seed).
#   PHASE seed:    `segmirror seed` of the source into an empty store, then `sync`, from a cold page cache.
#   PHASE catchup: seed + apply + sync from a cold page cache; the word `cp` as a BINARY times `cp -r` twice + sync
#                  of the same partitions instead (catchup.sh's baseline).
#   WORK (default target/bench/catchup-512MiB-200-small, made by `tools/bench/catchup.sh 512MiB 200
#   --small-batches`) holds the source in src/; the apply phase seeds a store there with the first binary if none.
# Needs root (drop_caches). Example: tools/bench/phase_ab.sh apply 7 ./segmirror-before target/release/segmirror
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PHASE="${1:?phase: apply, seed or catchup}"
ROUNDS="${2:?rounds}"
shift 2
[ "$#" -ge 1 ] || { echo "name at least one binary" >&2; exit 2; }
WORK="${WORK:-$ROOT/target/bench/catchup-512MiB-200-small}"
[ -d "$WORK/src" ] || { echo "$WORK/src missing: run tools/bench/catchup.sh 512MiB 200 --small-batches first" >&2; exit 2; }
cd "$WORK"
mapfile -t PARTS < <(find src -mindepth 1 -maxdepth 1 -type d | sort)
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; sleep 3; }
timed() { /usr/bin/time -f "$1 %e %U %S" -a -o "$OUT" sh -c "$2"; }

if [ "$PHASE" = apply ] && [ ! -d store ]; then
    "$1" seed --log-dir src --store store > /dev/null
fi
for _ in $(seq 1 "$ROUNDS"); do
    for b in "$@"; do
        case "$PHASE" in
            apply)
                rm -rf mirror catalog.sqlite*
                cold
                find store -type f -exec cat {} + > /dev/null
                timed "$b" "'$b' apply --store store --mirror mirror --catalog catalog.sqlite > /dev/null && sync" ;;
            seed)
                rm -rf store-ab
                cold
                timed "$b" "'$b' seed --log-dir src --store store-ab > /dev/null && sync" ;;
            catchup)
                rm -rf store-ab mirror-ab catalog-ab.sqlite* copy-a copy-b
                cold
                if [ "$b" = cp ]; then
                    timed cp "mkdir copy-a copy-b && cp -r ${PARTS[*]} copy-a && cp -r copy-a/* copy-b && sync"
                else
                    timed "$b" "'$b' seed --log-dir src --store store-ab > /dev/null && '$b' apply --store store-ab \
                        --mirror mirror-ab --catalog catalog-ab.sqlite > /dev/null && sync"
                fi ;;
            *) echo "unknown phase: $PHASE" >&2; exit 2 ;;
        esac
    done
done
rm -rf store-ab mirror-ab catalog-ab.sqlite* copy-a copy-b

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "| binary | $PHASE wall s, median | CPU s, median | every run, wall s |"
echo "|---|---|---|---|"
for b in "$@"; do
    walls=$(awk -v b="$b" '$1 == b { printf "%s ", $2 }' "$OUT")
    cpus=$(awk -v b="$b" '$1 == b { printf "%.2f ", $3 + $4 }' "$OUT")
    echo "| $(basename "$b") | $(echo "$walls" | median) | $(echo "$cpus" | median) | $walls|"
done
echo
echo "reproduce: tools/bench/phase_ab.sh $PHASE $ROUNDS $*"
