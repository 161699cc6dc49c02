#!/usr/bin/env bash
# Interleaved A/B of one catch-up phase between segmirror binaries: the same work, the binaries taking
# turns round after round, so that the machine's drift (shared host, page cache, the file system's recently freed
# inodes) falls on all of them alike. Prints, per binary, the median wall and CPU seconds and every run.
#
# Usage: tools/bench/phase_ab.sh PHASE ROUNDS BINARY...
#   PHASE apply:   `segmirror apply` of the store into an empty mirror, then `sync`; before each run the mirror and
#                  catalog are removed, the page cache dropped and the store read once (as right after a seed).
#   PHASE seed:    `segmirror seed` of the source into an empty store, then `sync`, from a cold page cache.
#   PHASE catchup: seed + apply + sync from a cold page cache; the word `cp` as a BINARY times `cp -r` twice + sync
#                  of the same partitions instead (catchup.sh's baseline).
#   PHASE audit:   `segmirror verify file://<store>` (the scrubber's audit: every object hashed against its
#                  manifest) from a cold page cache; the word `cat` as a BINARY reads the same objects with `cat`
#                  instead. Also prints how much of the store the page cache holds afterwards.
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

if { [ "$PHASE" = apply ] || [ "$PHASE" = audit ]; } && [ ! -d store ]; then
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
            audit)
                cold
                if [ "$b" = cat ]; then
                    timed cat "find store -type f -exec cat {} + > /dev/null"
                else
                    timed "$b" "'$b' verify 'file://$WORK/store' > /dev/null"
                fi
                # MiB of the store in the page cache after the run (fincore: resident bytes per file).
                echo "$b cached $(find store -type f -print0 | xargs -0 fincore -b -n -o RES | awk '{ s += $1 } END { printf "%.0f", s / 1048576 }')" >> "$OUT" ;;
            *) echo "unknown phase: $PHASE" >&2; exit 2 ;;
        esac
    done
done
rm -rf store-ab mirror-ab catalog-ab.sqlite* copy-a copy-b

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "| binary | $PHASE wall s, median | CPU s, median | every run, wall s | store MiB cached after, median |"
echo "|---|---|---|---|---|"
for b in "$@"; do
    walls=$(awk -v b="$b" '$1 == b && $2 != "cached" { printf "%s ", $2 }' "$OUT")
    cpus=$(awk -v b="$b" '$1 == b && $2 != "cached" { printf "%.2f ", $3 + $4 }' "$OUT")
    cached=$(awk -v b="$b" '$1 == b && $2 == "cached" { printf "%s ", $3 }' "$OUT")
    echo "| $(basename "$b") | $(echo "$walls" | median) | $(echo "$cpus" | median) | $walls| ${cached:+$(echo "$cached" | median)} |"
done
echo
echo "reproduce: tools/bench/phase_ab.sh $PHASE $ROUNDS $*"
