#!/usr/bin/env bash
# Benchmark: the continuous services with many partitions. For each partition count N a generated source log dir
# (topic `bulk`, N partitions of PER_PARTITION_KIB KiB of .log each, clean shutdown, no broker) is replicated
#   - direct: `segmirror ship --connect` -> `segmirror apply --listen`, plaintext loopback, `--upto log-end`;
#   - bucket: `segmirror ship --store DIR --upto log-end` (a local folder) -> `segmirror apply --store DIR --follow`;
# each pair started together and run until the mirror's .log files hold as many bytes as the source's (catch-up:
# wall seconds from the start of both processes, and CPU seconds of each). Then, with nothing new to replicate, each
# long-running process is measured over IDLE_S seconds (after SETTLE_S seconds of quiet):
#   CPU %   (utime + stime delta from /proc/PID/stat over the window, in % of one core),
#   RSS     (VmRSS at the end of the window; peak = VmHWM over the whole run),
#   fds     (entries of /proc/PID/fd), threads (Threads: of /proc/PID/status),
#   watches (inotify watches the process holds: `inotify wd:` lines of /proc/PID/fdinfo/* of its inotify fds).
# While both run: `segmirror status` of the applier's catalog (wall s; it reads the catalog the running applier
# writes) and `GET /metrics` of each process (--metrics-addr; curl's time_total).
# After both stopped: `segmirror promote --handover rename --force` of the tail-fed (direct) mirror into a generated
# stopped target log dir with the same N partitions at the same leader epoch (nothing restamped), wall s; then of the
# bucket-fed mirror the same way.
#
# No Kafka broker is needed: both shippers read a generated log dir with `--upto log-end`.
# Kafka's own limits at this scale are printed with the table: the open-file limit (`ulimit -n`; a broker holds
# one descriptor per segment file it has open) and fs.inotify.max_user_watches (a watcher on the source takes one
# watch per partition directory).
#
# Usage: tools/bench/partitions.sh [N...]   (default "100 1000")
#   PER_PARTITION_KIB (default 64: four 16 KiB batches) KiB of .log per partition;
#   IDLE_S (default 10) idle window; SETTLE_S (default 3); CATCH_UP_S (default 1800) gives up after that long;
#   PATHS (default "direct bucket"); PROMOTE=0 skips promote; BENCH_DIR (default target/bench), the work dir
#   BENCH_DIR/partitions-N is deleted after each N (KEEP=1 keeps it);
#   SEGMIRROR=path runs that binary instead of building target/release/segmirror;
#   BROKER_CHECKPOINTS=1 rewrites the source's replication-offset-checkpoint every 5 s and its
#   log-start-offset-checkpoint every 60 s during the settle and idle windows (a temp file renamed over each, same
#   content), as a live broker does whatever happens (`replica.high.watermark.checkpoint.interval.ms`,
#   `log.flush.start.offset.checkpoint.interval.ms`): the idle figures then are those beside a running broker.
# Not a test: scripts/test-all.sh does not run it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
COUNTS="${*:-100 1000}"
PER_PARTITION_KIB="${PER_PARTITION_KIB:-64}"
IDLE_S="${IDLE_S:-10}"
SETTLE_S="${SETTLE_S:-3}"
CATCH_UP_S="${CATCH_UP_S:-1800}"
PATHS="${PATHS:-direct bucket}"
PROMOTE="${PROMOTE:-1}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
BIN="${SEGMIRROR:-$ROOT/target/release/segmirror}"
KAFKA_HOME="${SEGMIRROR_KAFKA_HOME:-$ROOT/.cache/kafka/4.4.0}"
cd "$ROOT"
[ -n "${SEGMIRROR:-}" ] || cargo build --release -q -p segmirror
# shellcheck source=tools/bench/lib.sh
source "$ROOT/tools/bench/lib.sh"

PIDS=()
WORK=""
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || [ -z "$WORK" ] || rm -rf "$WORK"
}
trap cleanup EXIT

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
log_bytes() { find "$1" -name '*.log' -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'; }
rss_kib() { awk '$1 == "VmRSS:" { print $2 }' "/proc/$1/status"; }
threads() { awk '$1 == "Threads:" { print $2 }' "/proc/$1/status"; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
watches() { # inotify watches held by PID
    local fd n=0
    for fd in /proc/"$1"/fd/*; do
        [ "$(readlink "$fd" 2>/dev/null)" = "anon_inode:inotify" ] || continue
        n=$((n + $(grep -c '^inotify wd:' "/proc/$1/fdinfo/${fd##*/}" 2>/dev/null || true)))
    done
    echo "$n"
}
# timed_s COMMAND...: wall seconds of a command (its output to $WORK/last.out); "fail" if it failed.
timed_s() {
    local a b
    a=$(now)
    if "$@" > "$WORK/last.out" 2>&1; then b=$(now); elapsed "$a" "$b"; else echo fail; fi
}
metrics_s() { curl -s -o /dev/null -w '%{time_total}' --max-time 30 "http://$1/metrics" || echo fail; }

ROWS=()   # "N path process catchup_s cpu_catchup_s idle_cpu_pct rss_mib hwm_mib fds threads watches metrics_s"
EXTRA=()  # "N path status_s promote_s"
wait_caught_up() { # source mirror want -> prints the caught-up time or "stalled"
    local deadline=$(( $(date +%s) + CATCH_UP_S ))
    while [ "$(log_bytes "$2")" != "$3" ]; do
        [ "$(date +%s)" -lt "$deadline" ] || { echo stalled; return; }
        for p in "$4" "$5"; do kill -0 "$p" 2>/dev/null || { echo "died"; return; }; done
        sleep 0.2
    done
    now
}
run_pair() { # N path
    local n="$1" path="$2" dir="$WORK/$2" port ship apply start done_at sm am
    mkdir -p "$dir"
    port=$(free_port) sm="127.0.0.1:$(free_port)" am="127.0.0.1:$(free_port)"
    export SEGMIRROR_HOME="$dir/home"
    start=$(now)
    if [ "$path" = direct ]; then
        "$BIN" apply --mirror "$dir/mirror" --catalog "$dir/catalog.sqlite" --link bench \
            --listen "127.0.0.1:$port" --plaintext --metrics-addr "$am" > "$dir/apply.out" 2>&1 &
        apply=$!
        "$BIN" ship --log-dir "$SRC" --upto log-end --link bench --connect "127.0.0.1:$port" --plaintext \
            --metrics-addr "$sm" > "$dir/ship.out" 2>&1 &
        ship=$!
    else
        # A local-folder store must exist before the follower opens it (the shipper creates it on its first
        # commit, which may come after the follower starts).
        mkdir -p "$dir/store"
        "$BIN" ship --store "$dir/store" --log-dir "$SRC" --upto log-end --link bench \
            --metrics-addr "$sm" > "$dir/ship.out" 2>&1 &
        ship=$!
        "$BIN" apply --store "$dir/store" --follow --mirror "$dir/mirror" --catalog "$dir/catalog.sqlite" \
            --link bench --metrics-addr "$am" > "$dir/apply.out" 2>&1 &
        apply=$!
    fi
    PIDS+=("$ship" "$apply")
    done_at=$(wait_caught_up "$SRC" "$dir/mirror" "$SRC_BYTES" "$ship" "$apply")
    local catchup="$done_at" cs ca
    case "$done_at" in
        stalled | died)
            echo "  $path: $done_at at $(log_bytes "$dir/mirror") of $SRC_BYTES bytes; the last lines of its output:" >&2
            tail -n 5 "$dir/ship.out" "$dir/apply.out" >&2 || true
            kill -TERM "$ship" "$apply" 2>/dev/null || true
            wait "$ship" "$apply" 2>/dev/null || true
            ROWS+=("$n $path ship,apply $done_at - - - - - - - -")
            EXTRA+=("$n $path - -")
            [ "${KEEP:-0}" = 1 ] || rm -rf "$dir"
            return
            ;;
        *) catchup=$(elapsed "$start" "$done_at") ;;
    esac
    cs=$(cpu_s "$ship") ca=$(cpu_s "$apply")
    echo "  $path: caught up in $catchup s; settling $SETTLE_S s, idle window $IDLE_S s" >&2
    local checkpoints=""
    if [ "${BROKER_CHECKPOINTS:-0}" = 1 ]; then
        (
            cp_file="$SRC/replication-offset-checkpoint"
            ls_file="$SRC/log-start-offset-checkpoint"
            [ -f "$cp_file" ] || printf '0\n0\n' > "$cp_file"
            [ -f "$ls_file" ] || printf '0\n0\n' > "$ls_file"
            ticks=0
            while true; do
                sleep 5
                cp "$cp_file" "$cp_file.tmp" && mv "$cp_file.tmp" "$cp_file"
                ticks=$((ticks + 1))
                if [ $((ticks % 12)) = 0 ]; then
                    cp "$ls_file" "$ls_file.tmp" && mv "$ls_file.tmp" "$ls_file"
                fi
            done
        ) &
        checkpoints=$!
    fi
    sleep "$SETTLE_S"
    local s0 a0 s1 a1
    s0=$(cpu_s "$ship") a0=$(cpu_s "$apply")
    sleep "$IDLE_S"
    s1=$(cpu_s "$ship") a1=$(cpu_s "$apply")
    [ -z "$checkpoints" ] || { kill "$checkpoints" 2>/dev/null || true; wait "$checkpoints" 2>/dev/null || true; }
    local status_s ms ma
    status_s=$(timed_s "$BIN" status --catalog "$dir/catalog.sqlite")
    ms=$(metrics_s "$sm") ma=$(metrics_s "$am")
    local name pid c0 c1 ccu mt
    for name in ship apply; do
        if [ "$name" = ship ]; then pid=$ship c0=$s0 c1=$s1 ccu=$cs mt=$ms; else pid=$apply c0=$a0 c1=$a1 ccu=$ca mt=$ma; fi
        ROWS+=("$n $path $name $catchup $ccu $(awk -v a="$c0" -v b="$c1" -v t="$IDLE_S" 'BEGIN { printf "%.2f", (b - a) * 100 / t }') $(( $(rss_kib "$pid") / 1024 )) $(( $(hwm_kib "$pid") / 1024 )) $(fds "$pid") $(threads "$pid") $(watches "$pid") $mt")
    done
    kill -TERM "$ship" "$apply" 2>/dev/null || true
    wait "$ship" "$apply" 2>/dev/null || true
    local promote_s="-"
    if [ "$PROMOTE" != 0 ]; then
        rm -rf "$WORK/target"
        cp -a "$TEMPLATE" "$WORK/target"
        sync
        promote_s=$(timed_s "$BIN" promote --mirror "$dir/mirror" --log-dir "$WORK/target" \
            --catalog "$dir/catalog.sqlite" --force --allow-retention-delete --handover rename)
        [ "$promote_s" != fail ] || tail -n 5 "$WORK/last.out" >&2
        rm -rf "$WORK/target"
    fi
    EXTRA+=("$n $path $status_s $promote_s")
    [ "${KEEP:-0}" = 1 ] || rm -rf "$dir"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for n in $COUNTS; do
    WORK="$BENCH_DIR/partitions-$n"
    rm -rf "$WORK"
    mkdir -p "$WORK"
    SRC="$WORK/src" TEMPLATE="$WORK/template"
    echo "N=$n: generating $n partitions x $PER_PARTITION_KIB KiB" >&2
    "$BIN" generate --out "$SRC" --bulk-bytes "$((n * PER_PARTITION_KIB))KiB" --partitions "$n" --no-fsync > /dev/null
    "$BIN" generate --out "$TEMPLATE" --bulk-bytes "$((n * 1024))" --partitions "$n" --seed 1 --no-fsync > /dev/null
    sync
    SRC_BYTES=$(log_bytes "$SRC")
    for path in $PATHS; do
        echo "N=$n: $path" >&2
        run_pair "$n" "$path"
    done
    [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "partitions benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'): $PER_PARTITION_KIB KiB of .log per partition (topic bulk," \
    "16 KiB batches), --upto log-end, plaintext loopback / local-folder store; idle window $IDLE_S s"
echo "machine: $(nproc) CPUs, kernel $(uname -r); load average before/after: $LOAD_BEFORE / $LOAD_AFTER"
echo "limits: ulimit -n $(ulimit -n) (hard $(ulimit -Hn)); fs.inotify.max_user_watches" \
    "$(cat /proc/sys/fs/inotify/max_user_watches); fs.inotify.max_user_instances" \
    "$(cat /proc/sys/fs/inotify/max_user_instances)"
echo "reproduce: PER_PARTITION_KIB=$PER_PARTITION_KIB IDLE_S=$IDLE_S PATHS=\"$PATHS\" BROKER_CHECKPOINTS=${BROKER_CHECKPOINTS:-0} tools/bench/partitions.sh $COUNTS"
echo
echo "| partitions | path | process | catch-up s | catch-up CPU s | idle CPU % | RSS MiB | peak RSS MiB | fds | threads | inotify watches | /metrics s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}" | awk '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 }'
echo
echo "| partitions | path | status s (applier catalog, live) | promote --handover rename s |"
echo "|---|---|---|---|"
printf '%s\n' "${EXTRA[@]}" | awk '{ printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }'
