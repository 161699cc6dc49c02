#!/usr/bin/env bash
# Benchmark: catch-up END TO END against Apache MirrorMaker 2: each path is timed from the start of its processes
# until a consumer on the TARGET cluster can read every record, not until a mirror holds the bytes (that is
# tools/bench/mm2.sh's catch-up). One machine, single-node KRaft brokers from the harness's Kafka jars: the source,
# and a target broker whose log dir is restored from a snapshot before every path (promotion moves files into it,
# MirrorMaker 2 produces into it), so every path meets the same empty target.
#
# The source topic is produced once: SIZE_GIB of 1 KiB records (Kafka's ProducerPerformance, acks=all, lz4) in
# PARTITIONS partitions, with nothing replicating. Its end offsets are read once (the topic has no transactions).
# Then RUNS rounds, each running every path once in the same order (bucket, direct, MirrorMaker 2, cp), and the
# page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches, where permitted) before each path. Per path:
# - bucket: `segmirror seed` (the source log dir -> a local-folder store) + `segmirror apply` (store -> a mirror
#   root) + `segmirror promote --handover rename` (the mirror's files renamed into the STOPPED target broker's log
#   dir, where the topic was created with the same partition count before the snapshot) + the target broker's JVM
#   start + the check;
# - direct: `segmirror ship` + `segmirror apply --listen` (loopback mutual TLS, `--upto high-watermark
#   --source-bootstrap`: committed records only, as MirrorMaker 2 reads), started together, until the applier's
#   catalog says every partition is installed up to the source's end offset (`segmirror status --json`, polled
#   every 0.2 s once the mirror's .log files hold every source byte); then both get SIGTERM and are waited for,
#   then `promote --handover rename`, the target broker's start and the check as above;
# - MirrorMaker 2 (connect-mirror MM2_VERSION from .cache/, as tools/bench/mm2.sh fetches it: the dedicated
#   driver, one JVM, identity replication policy, tasks.max = PARTITIONS, lz4 on the target, Kafka's defaults
#   otherwise) from a cold start (JVM, Connect group, task start-up, topic creation) until the check passes on
#   the target broker, which runs (started before the timing, its log dir without the topic) as MirrorMaker 2
#   needs; MM2_MAX_S stops it early: its row is then EXTRAPOLATED (wall and CPU x records / records copied) and
#   says so;
# - cp: `cp -r` of the topic's partition dirs from the source log dir into a folder, `cp -r` of that folder into
#   another (the two copies seed + apply make), then `sync`: a reference for the disk, with no broker involved.
# The check: the sum of the target topic's end offsets (librdkafka ListOffsets, polled every 0.1 s from the moment
# the path's last step starts, retrying while the broker starts) equals the source's. Then, untimed, a sample of
# records (SAMPLE records at the start, the middle and the end of every partition) is read by a consumer from the
# target and from the source: same offsets, same keys and values, or the run fails.
#
# Figures, per path (medians of the RUNS runs; each run's figures printed too):
# - wall s: the path's first process start to the check's end-offset match (epoch seconds, one clock);
# - vs MM2: MirrorMaker 2's median wall / the path's (higher is faster);
# - CPU s: utime + stime of EVERY process involved, both brokers included on every path: segmirror's processes
#   (/usr/bin/time, or /proc/<pid>/stat just before SIGTERM for ship and apply --listen), MirrorMaker 2's JVM
#   (/proc/<pid>/stat at the check), the source broker's and (MirrorMaker 2) the running target broker's
#   /proc/<pid>/stat deltas over the path, the target broker started by a segmirror path: all its CPU from its
#   start to the check. The checker's own CPU is not counted. cp: the cp and sync processes' CPU (/usr/bin/time);
# - CPU vs MM2: the path's median CPU s / MirrorMaker 2's (lower is cheaper);
# - phases (segmirror paths): to the mirror (seed + apply, or ship + apply --listen until installed and stopped),
#   promote, broker start to the check.
#
# Usage: tools/bench/catchup_e2e.sh
#   SIZE_GIB (default 4; decimals allowed: 0.25), PARTITIONS (default 8; also MirrorMaker 2's tasks.max), RUNS
#   (default 3), MM2_MAX_S (default 1800), SAMPLE (default 20 records per place), PATHS (default "bucket direct mm2
#   cp"), MM2_VERSION (default 4.3.1), MM2_HOME (default .cache/connect-mirror/<version>, fetched by mm2.sh),
#   SEGMIRROR=path (default target/release/segmirror, built if absent), SEGMIRROR_KAFKA_HOME (default
#   .cache/kafka/4.4.0), BENCH_DIR (default target/bench; the run's data is removed at the end unless KEEP=1).
#   PROMOTE_SYNC=1 runs `sync` before each promote (its time in "to the mirror"): promote makes its files durable
#   with one syncfs of the log dir's filesystem, which also writes back whatever else is dirty there (here: the
#   local-folder store seed just wrote, not fsynced), so this separates promote's own time from that.
# Disk: the source, plus per segmirror path the store and the mirror (the mirror becomes the target's log), or per
# MirrorMaker 2 run its target copy; each path's copies are deleted as soon as it is measured. About 3 x SIZE_GIB
# at peak; a path is skipped in a run (its row says so) when less than what it needs plus 1 GiB is free.
# Not a test: scripts/test-all.sh does not run it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SIZE_GIB="${SIZE_GIB:-4}"
PARTITIONS="${PARTITIONS:-8}"
RUNS="${RUNS:-3}"
MM2_MAX_S="${MM2_MAX_S:-1800}"
SAMPLE="${SAMPLE:-20}"
PATHS="${PATHS:-bucket direct mm2 cp}"
MM2_VERSION="${MM2_VERSION:-4.3.1}"
MM2_HOME="${MM2_HOME:-$ROOT/.cache/connect-mirror/$MM2_VERSION}"
BENCH_DIR="${BENCH_DIR:-$ROOT/target/bench}"
KAFKA_HOME="${SEGMIRROR_KAFKA_HOME:-$ROOT/.cache/kafka/4.4.0}"
BIN="${SEGMIRROR:-$ROOT/target/release/segmirror}"
WORK="$BENCH_DIR/catchup_e2e"
# Longest wait for the direct pair to install everything, and for a promoted target to serve it.
CATCH_UP_S=3600
SERVE_S=600
STOP_S=60
RECORD_BYTES=1024
TOPIC=catchup
PROBE="$ROOT/tools/bench/mm2_probe.py"

cd "$ROOT"
# shellcheck source=tools/bench/lib.sh
source "$ROOT/tools/bench/lib.sh"
[ -d "$KAFKA_HOME/libs" ] || { echo "no Kafka jars in $KAFKA_HOME/libs (set SEGMIRROR_KAFKA_HOME)" >&2; exit 2; }
if [[ " $PATHS " == *" mm2 "* ]] && [ ! -f "$MM2_HOME/.complete" ]; then
    echo "no connect-mirror jars in $MM2_HOME: run tools/bench/mm2.sh once (it fetches them), or PATHS without mm2" >&2
    exit 2
fi
[ -n "${SEGMIRROR:-}" ] || cargo build --release -q -p segmirror

rm -rf "$WORK"
mkdir -p "$WORK"
export SEGMIRROR_HOME="$WORK/home"
PIDS=()
cleanup() {
    local live=() p running
    running=" $(jobs -p | tr '\n' ' ') "
    for p in "${PIDS[@]}"; do [[ "$running" == *" $p "* ]] && live+=("$p"); done
    [ -z "${MM2_PID:-}" ] || [[ "$running" != *" $MM2_PID "* ]] || stop_pids "$MM2_PID"
    [ "${#live[@]}" = 0 ] || stop_pids "${live[@]}"
    [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK" "${BROKER_DATA_DIRS[@]}"
}
trap cleanup EXIT
CERTS="$WORK/certs"
bench_certs "$CERTS"
TLS_SHIP=(--tls-cert "$CERTS/ship.crt" --tls-key "$CERTS/ship.key" --tls-ca "$CERTS/ca.crt")
TLS_APPLY=(--tls-cert "$CERTS/apply.crt" --tls-key "$CERTS/apply.key" --tls-ca "$CERTS/ca.crt")

now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
add() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.3f", s }'; }
DROP_OK=no
{ echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null && DROP_OK=yes
T="$WORK/.time"
# timed OUT COMMAND...: runs COMMAND (output in OUT) under /usr/bin/time; prints its CPU s (user + sys).
timed() {
    local out="$1"
    shift
    /usr/bin/time -o "$T" -f '%e %U %S' "$@" > "$out" 2>&1 || {
        echo "failed: $* (output in $out)" >&2
        tail -n 20 "$out" >&2
        exit 1
    }
    tail -n1 "$T" | awk '{ print $2 + $3 }'
}
# need_free BYTES: fails (the path is skipped in this run, and its row says so) with less than BYTES + 1 GiB free in
# WORK: the disk may be shared.
need_free() {
    local avail
    avail=$(df --output=avail -B1 "$WORK" | tail -1)
    [ "$avail" -ge $(($1 + (1 << 30))) ] || {
        echo "run $run, $path skipped: $(($1 + (1 << 30))) bytes of free space needed in $WORK, $avail free" >&2
        RESULTS+=("$path $run - - - - - skipped:$avail-bytes-free - - -")
        return 1
    }
}

# The target broker: lib.sh's start_broker, snapshots of its stopped log dir (without the topic: MirrorMaker 2's
# target; with it: promotion's), restored before every path.
# start_target: the target broker's JVM on its restored log dir (lib.sh's command line); sets TGT_PID.
start_target() {
    java -Xmx1g -Xms1g -XX:+UseG1GC -Dkafka.logs.dir="$WORK/target" \
        -Dlog4j2.configurationFile="$ROOT/tests/kafka/broker-log4j2.properties" \
        -cp "$KAFKA_HOME/libs/*" kafka.Kafka "$WORK/target/server.properties" >> "$WORK/target/stdout" 2>&1 &
    TGT_PID=$!
    PIDS+=("$TGT_PID")
}
# wait_target: until the target broker answers a metadata request (as lib.sh's start_broker waits).
wait_target() {
    local i
    for i in $(seq 240); do
        python3 -c 'import sys
from confluent_kafka.admin import AdminClient
sys.exit(0 if AdminClient({"bootstrap.servers": sys.argv[1]}).list_topics(timeout=2).brokers else 1)' "$TGT_BOOT" \
            2>/dev/null && return
        sleep 0.5
    done
    echo "the target broker did not start (see $WORK/target/stdout)" >&2
    exit 1
}
# restore_target SNAPSHOT: the target broker's log dir as SNAPSHOT holds it (the broker stopped).
restore_target() {
    rm -rf "$TGT_LOG"
    cp -a "$WORK/$1" "$TGT_LOG"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
mkdir -p "$WORK/source" "$WORK/target"
start_broker "$WORK/source"
SRC_PID=$BROKER_PID SRC_BOOT=$BROKER_BOOTSTRAP SRC_LOG=$BROKER_LOG_DIR
start_broker "$WORK/target"
TGT_PID=$BROKER_PID TGT_BOOT=$BROKER_BOOTSTRAP TGT_LOG=$BROKER_LOG_DIR
stop_pids "$TGT_PID"
cp -a "$TGT_LOG" "$WORK/target-empty"
start_target
wait_target
create_topic "$TGT_BOOT" "$TGT_LOG" "$TOPIC" "$PARTITIONS"
stop_pids "$TGT_PID"
cp -a "$TGT_LOG" "$WORK/target-topic"

create_topic "$SRC_BOOT" "$SRC_LOG" "$TOPIC" "$PARTITIONS"
RECORDS=$(awk -v g="$SIZE_GIB" -v r="$RECORD_BYTES" 'BEGIN { printf "%.0f", g * 1073741824 / r }')
echo "producing $RECORDS records of $RECORD_BYTES bytes (lz4) into $TOPIC ($PARTITIONS partitions)" >&2
java_cp 512 org.apache.kafka.tools.ProducerPerformance --topic "$TOPIC" --num-records "$RECORDS" \
    --record-size "$RECORD_BYTES" --throughput -1 --producer-props "bootstrap.servers=$SRC_BOOT" acks=all \
    linger.ms=5 batch.size=262144 compression.type=lz4 > "$WORK/producer.out" 2>&1
LOG_BYTES=$(find "$SRC_LOG" -path "*/$TOPIC-*/*.log" -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s }')
sync

# The checker (Python, confluent-kafka): `ends BOOTSTRAP TOPIC` prints the per-partition end offsets as p:end...;
# `wait BOOTSTRAP TOPIC WANT TIMEOUT_S` polls the sum of the end offsets every 0.1 s (errors while the broker starts
# are retried, reconnects every 0.2 s at most) and prints the time the sum reached WANT (epoch s) or nan and the sum;
# `sample SOURCE TARGET TOPIC N p:end...` reads N records at the start, middle and end of every partition from both
# and prints "same" or what differs.
CHECK="$WORK/check.py"
cat > "$CHECK" <<'PY'
import sys, time
from confluent_kafka import Consumer, TopicPartition

def consumer(bootstrap):
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "catchup-e2e", "enable.auto.commit": False,
                     "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200, "retry.backoff.ms": 50,
                     "retry.backoff.max.ms": 200, "log_level": 0, "auto.offset.reset": "error"})

def ends(c, topic):
    md = c.list_topics(topic, timeout=5).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        return {}
    return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1] for p in md.partitions}

def read(c, topic, p, start, n):
    c.assign([TopicPartition(topic, p, start)])
    out, deadline = [], time.monotonic() + 60
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error() is not None:
            continue
        out.append((m.offset(), m.key(), m.value()))
    return out

cmd = sys.argv[1]
if cmd == "ends":
    c = consumer(sys.argv[2])
    print(" ".join("%d:%d" % kv for kv in sorted(ends(c, sys.argv[3]).items())))
elif cmd == "wait":
    c = consumer(sys.argv[2])
    want, deadline, have = int(sys.argv[4]), time.monotonic() + float(sys.argv[5]), 0
    while True:
        try:
            have = sum(ends(c, sys.argv[3]).values())
        except Exception:
            pass
        if have >= want:
            print("%.6f %d" % (time.time(), have))
            break
        if time.monotonic() > deadline:
            print("nan %d" % have)
            break
        time.sleep(0.1)
elif cmd == "sample":
    src, tgt, topic, n = consumer(sys.argv[2]), consumer(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    bad = []
    for pe in sys.argv[6:]:
        p, end = (int(x) for x in pe.split(":"))
        for start in sorted({0, max(0, end // 2 - n // 2), max(0, end - n)}):
            k = min(n, end - start)
            a, b = read(src, topic, p, start, k), read(tgt, topic, p, start, k)
            if len(a) != k or a != b:
                bad.append("%s-%d@%d: source %d records, target %d, equal %s" % (topic, p, start, len(a), len(b), a == b))
    print("same" if not bad else "differs: " + "; ".join(bad))
PY
SRC_ENDS=$(python3 "$CHECK" ends "$SRC_BOOT" "$TOPIC")
SRC_RECORDS=$(echo "$SRC_ENDS" | tr ' ' '\n' | awk -F: '{ s += $2 } END { print s }')
echo "source: $LOG_BYTES bytes of .log, $SRC_RECORDS records ($SRC_ENDS)" >&2

# check_target START: waits for the target to serve every record (the time in DONE_AT; exits on a timeout), then
# compares the sample (SAMPLE_OK).
check_target() {
    local r have
    r=$(python3 "$CHECK" wait "$TGT_BOOT" "$TOPIC" "$SRC_RECORDS" "$1")
    read -r DONE_AT have <<< "$r"
    [ "$DONE_AT" != nan ] || { echo "the target serves $have of $SRC_RECORDS records after $1 s" >&2; return 1; }
}
sample_target() {
    # shellcheck disable=SC2086
    SAMPLE_OK=$(python3 "$CHECK" sample "$SRC_BOOT" "$TGT_BOOT" "$TOPIC" "$SAMPLE" $SRC_ENDS)
    [ "$SAMPLE_OK" = same ] || { echo "run $run, $path: the target's records differ: $SAMPLE_OK" >&2; exit 1; }
}

# One result per path and run in RESULTS: "path run wall cpu phase1 phase2 phase3 note own_cpu src_broker_cpu
# tgt_broker_cpu" (MirrorMaker 2's CPU unscaled when partial).
declare -a RESULTS
src_mark() { SRC0=$(cpu_s "$SRC_PID"); }
src_delta() { sub "$SRC0" "$(cpu_s "$SRC_PID")"; }

# promote_and_serve DIR START OWN_CPU PHASE1_END: promote DIR/mirror into the stopped target, start it, check;
# appends the row of the path ($path) begun at START with OWN_CPU s of its own processes so far.
promote_and_serve() {
    local dir="$1" start="$2" own="$3" p1="$4" pcpu p2 tcpu
    pcpu=$(timed "$dir/promote.out" "$BIN" promote --mirror "$dir/mirror" --catalog "$dir/catalog.sqlite" \
        --log-dir "$TGT_LOG" --target-config "$WORK/target/server.properties" --handover rename)
    p2=$(now)
    start_target
    check_target "$SERVE_S" || { tail -n 30 "$WORK/target/stdout" >&2; exit 1; }
    tcpu=$(cpu_s "$TGT_PID")
    local cpu sb
    sb=$(src_delta)
    cpu=$(add "$own" "$pcpu" "$tcpu" "$sb")
    sample_target
    RESULTS+=("$path $run $(sub "$start" "$DONE_AT") $cpu $(sub "$start" "$p1") $(sub "$p1" "$p2") $(sub "$p2" "$DONE_AT") ok $(add "$own" "$pcpu") $sb $tcpu")
    grep -iE "rename|handed" "$dir/promote.out" | head -n 3 > "$WORK/promote-$path-$run.txt" || true
    stop_pids "$TGT_PID"
    rm -rf "$dir" "$TGT_LOG"
}

run_bucket() {
    local d="$WORK/bucket" start c1 c2 p1
    need_free $((LOG_BYTES * 2)) || return 0
    restore_target target-topic
    mkdir -p "$d"
    drop_caches
    src_mark
    start=$(now)
    c1=$(SEGMIRROR_HOME="$d/home" timed "$d/seed.out" "$BIN" seed --log-dir "$SRC_LOG" --topics "$TOPIC" \
        --store "$d/store" --link bench)
    c2=$(SEGMIRROR_HOME="$d/home" timed "$d/apply.out" "$BIN" apply --store "$d/store" --mirror "$d/mirror" \
        --catalog "$d/catalog.sqlite" --link bench)
    # PROMOTE_SYNC=1: what seed and apply left dirty on the filesystem written back first (counted in "to the
    # mirror"), so that promote's one syncfs of the log dir's filesystem does not include it.
    [ "${PROMOTE_SYNC:-0}" != 1 ] || sync
    p1=$(now)
    promote_and_serve "$d" "$start" "$(add "$c1" "$c2")" "$p1"
}

# installed_sum DIR: the sum of the installed end offsets in DIR/catalog.sqlite (0 while there is none).
installed_sum() {
    SEGMIRROR_HOME="$1/home" "$BIN" status --catalog "$1/catalog.sqlite" --json 2>/dev/null | python3 -c 'import json, sys
try:
    j = json.load(sys.stdin)
    print(sum(p.get("installed_end_offset") or 0 for l in j.get("links", []) for p in l.get("partitions", [])))
except Exception:
    print(0)'
}

run_direct() {
    local d="$WORK/direct" start port r done_at installed_at own p1 i
    need_free "$LOG_BYTES" || return 0
    restore_target target-topic
    mkdir -p "$d"
    drop_caches
    src_mark
    port=$(free_port)
    start=$(now)
    SEGMIRROR_HOME="$d/home" "$BIN" apply --mirror "$d/mirror" --catalog "$d/catalog.sqlite" --link bench \
        --listen "127.0.0.1:$port" "${TLS_APPLY[@]}" > "$d/apply.out" 2>&1 &
    APPLY_PID=$!
    PIDS+=("$APPLY_PID")
    SEGMIRROR_HOME="$d/home" "$BIN" ship --log-dir "$SRC_LOG" --topics "$TOPIC" --upto high-watermark \
        --source-bootstrap "$SRC_BOOT" --link bench --connect "localhost:$port" "${TLS_SHIP[@]}" \
        > "$d/ship.out" 2>&1 &
    SHIP_PID=$!
    PIDS+=("$SHIP_PID")
    r=$(python3 "$PROBE" wait-files "$SRC_LOG" "$d/mirror" "$TOPIC" "$CATCH_UP_S" 120)
    read -r done_at _ _ <<< "$r"
    [ "$done_at" != nan ] || { echo "the direct pair stalled" >&2; tail -n 15 "$d/ship.out" "$d/apply.out" >&2; exit 1; }
    # The bytes are in the files; the install (fsync, catalog) follows.
    for i in $(seq $((CATCH_UP_S * 5))); do
        [ "$(installed_sum "$d")" -ge "$SRC_RECORDS" ] && break
        sleep 0.2
    done
    installed_at=$(now)
    own=$(add "$(cpu_s "$SHIP_PID")" "$(cpu_s "$APPLY_PID")")
    stop_pids "$SHIP_PID" "$APPLY_PID"
    [ "${PROMOTE_SYNC:-0}" != 1 ] || sync
    p1=$(now)
    promote_and_serve "$d" "$start" "$own" "$p1"
    # Within "to the mirror": the bytes in the mirror's files, everything installed (catalog), both processes exited.
    RESULTS[-1]="${RESULTS[-1]/ ok / files=$(sub "$start" "$done_at"),installed=$(sub "$start" "$installed_at"),stopped=$(sub "$start" "$p1") }"
}

run_mm2() {
    local d="$WORK/mm2" start t0 cpu note=ok
    need_free "$LOG_BYTES" || return 0
    restore_target target-empty
    start_target
    wait_target
    mkdir -p "$d"
    write_mm2_properties "$d/mm2.properties" "$TOPIC"
    drop_caches
    src_mark
    t0=$(cpu_s "$TGT_PID")
    start=$(now)
    start_mm2 "$d/mm2.properties" "$d/mm2.log"
    PIDS+=("$MM2_PID")
    local r have
    r=$(python3 "$CHECK" wait "$TGT_BOOT" "$TOPIC" "$SRC_RECORDS" "$MM2_MAX_S")
    read -r DONE_AT have <<< "$r"
    local own sb tb
    own=$(cpu_s "$MM2_PID") sb=$(src_delta) tb=$(sub "$t0" "$(cpu_s "$TGT_PID")")
    cpu=$(add "$own" "$sb" "$tb")
    local wall
    if [ "$DONE_AT" = nan ]; then
        DONE_AT=$(now)
        wall=$(sub "$start" "$DONE_AT")
        [ "$have" -gt 0 ] || { echo "MirrorMaker 2 copied nothing in $MM2_MAX_S s (see $d/mm2.log)" >&2; exit 1; }
        note="partial:$have/$SRC_RECORDS-records-in-${wall}s,extrapolated"
        wall=$(awk -v w="$wall" -v h="$have" -v n="$SRC_RECORDS" 'BEGIN { printf "%.3f", w * n / h }')
        cpu=$(awk -v c="$cpu" -v h="$have" -v n="$SRC_RECORDS" 'BEGIN { printf "%.3f", c * n / h }')
    else
        wall=$(sub "$start" "$DONE_AT")
    fi
    stop_pids "$MM2_PID"
    MM2_PID=""
    [ "$note" != ok ] || sample_target
    RESULTS+=("$path $run $wall $cpu - - - $note $own $sb $tb")
    stop_pids "$TGT_PID"
    rm -rf "$d" "$TGT_LOG"
}

run_cp() {
    local d="$WORK/cp" start cpu
    need_free $((LOG_BYTES * 2)) || return 0
    mkdir -p "$d/a" "$d/b"
    drop_caches
    start=$(now)
    cpu=$(timed "$d/cp.out" bash -c "cp -r '$SRC_LOG'/$TOPIC-* '$d/a/' && cp -r '$d/a' '$d/b/' && sync")
    RESULTS+=("$path $run $(sub "$start" "$(now)") $cpu - - - ok $cpu 0 0")
    rm -rf "$d"
}

for run in $(seq "$RUNS"); do
    for path in $PATHS; do
        echo "run $run: $path (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        "run_$path"
        echo "  ${RESULTS[-1]}" >&2
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# The table: medians over the runs.
median() { { grep -E '^[0-9.]+$' || true; } | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit } m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f", m }'; }
col() { printf '%s\n' "${RESULTS[@]}" | awk -v p="$1" -v c="$2" '$1 == p { print $c }'; }
MM2_WALL=$(col mm2 3 | median)
MM2_CPU=$(col mm2 4 | median)
declare -A LABEL=(
    [mm2]="MirrorMaker 2 $MM2_VERSION, tasks.max=$PARTITIONS, cold start to the check"
    [bucket]="bucket: \`seed\`, \`apply\`, \`promote --handover rename\`, broker start, check"
    [direct]="direct: \`ship\` → \`apply --listen\` until installed, stop, \`promote --handover rename\`, broker start, check"
    [cp]="\`cp -r\` twice + \`sync\` (reference, no broker)"
)
REPRO="${SEGMIRROR:+SEGMIRROR=$SEGMIRROR }${PROMOTE_SYNC:+PROMOTE_SYNC=$PROMOTE_SYNC }SIZE_GIB=$SIZE_GIB PARTITIONS=$PARTITIONS RUNS=$RUNS MM2_MAX_S=$MM2_MAX_S PATHS=\"$PATHS\" tools/bench/catchup_e2e.sh"
echo
echo "Catch-up end to end, $(date -u '+%Y-%m-%d %H:%M UTC'): segmirror $("$BIN" --version | awk '{ print $2 }')" \
    "and MirrorMaker 2 $MM2_VERSION between two single-node Kafka $(basename "$KAFKA_HOME") brokers"
echo "topic: $(numfmt --to=iec-i --suffix=B "$LOG_BYTES") of .log ($LOG_BYTES bytes) in $PARTITIONS partitions" \
    "($SRC_RECORDS records of $RECORD_BYTES bytes, lz4); page cache dropped before each path: $DROP_OK"
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), kernel $(uname -r)," \
    "$(free -g | awk '$1 == "Mem:" { print $2 }') GiB RAM; load average before/after: $LOAD_BEFORE / $LOAD_AFTER"
echo "reproduce: $REPRO"
echo
echo "| path | wall s | vs MirrorMaker 2 | CPU s | CPU vs MirrorMaker 2 | CPU s: own / src broker / tgt broker | to the mirror / promote / broker start + check s | wall s, each run |"
echo "|---|---|---|---|---|---|---|---|"
for path in mm2 bucket direct cp; do
    [[ " $PATHS " == *" $path "* ]] || continue
    wall=$(col "$path" 3 | median)
    cpu=$(col "$path" 4 | median)
    phases="-"
    [ "$path" = mm2 ] || [ "$path" = cp ] || phases="$(col "$path" 5 | median) / $(col "$path" 6 | median) / $(col "$path" 7 | median)"
    ratio=$(awk -v m="$MM2_WALL" -v w="$wall" 'BEGIN { if (m == "-" || w <= 0) print "-"; else printf "%.1fx", m / w }')
    cratio=$(awk -v m="$MM2_CPU" -v c="$cpu" 'BEGIN { if (m == "-" || m <= 0) print "-"; else printf "%.3fx", c / m }')
    [ "$path" != cp ] || { cpu="($cpu)"; cratio="-"; }
    notes=$(col "$path" 8 | grep -E '^(partial|skipped)' | tr '\n' ' ' | sed 's/ $//' || true)
    [ -z "$notes" ] || LABEL[$path]="${LABEL[$path]} ($notes)"
    split="$(col "$path" 9 | median) / $(col "$path" 10 | median) / $(col "$path" 11 | median)"
    echo "| ${LABEL[$path]} | $wall | $ratio | $cpu | $cratio | $split | $phases | $(col "$path" 3 | tr '\n' ' ' | sed 's/ $//') |"
done
echo
echo "Every run (path run wall_s cpu_s to-mirror_s promote_s start+check_s note own_cpu_s src_broker_cpu_s tgt_broker_cpu_s):"
printf '  %s\n' "${RESULTS[@]}"
for f in "$WORK"/promote-*.txt; do [ -e "$f" ] && echo "$(basename "$f" .txt): $(head -c 300 "$f" | tr '\n' ' ')"; done
