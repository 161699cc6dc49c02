# Helpers shared by the real-broker benchmarks (tools/bench/tail.sh, tools/bench/mm2.sh, ...): sourced, not run.
# They start the harness's Kafka jars the way the benches always did, so that two benches measuring the same thing
# (a broker, a segmirror pair over mutual TLS) measure it set up the same way.
#
# The sourcing script sets ROOT (the repository) and KAFKA_HOME (the Kafka jars, libs/) first, and keeps the pids it
# starts in the array PIDS (killed by its own cleanup trap).

TICK=$(getconf CLK_TCK)

# The brokers' log dirs made under BROKER_DATA_ROOT (start_broker): the script removes them when it ends.
BROKER_DATA_DIRS=()
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# java_cp HEAP_MIB MAIN_CLASS ARGS...: a Kafka tool on the harness's jars, logging at the tools' level.
java_cp() { java -Xmx"$1"m -XX:+UseSerialGC -Dlog4j2.configurationFile="$ROOT/tests/kafka/tools-log4j2.properties" \
    -cp "$KAFKA_HOME/libs/*" "${@:2}"; }

# CPU seconds (utime + stime) a live process has used so far, and its peak resident set in KiB (VmHWM).
cpu_s() { awk -v t="$TICK" '{ print ($14 + $15) / t }' "/proc/$1/stat"; }
hwm_kib() { awk '$1 == "VmHWM:" { print $2 }' "/proc/$1/status"; }
# Resets a process's VmHWM to its current RSS (so the next hwm_kib is the peak of what follows); a no-op where the
# kernel refuses it.
reset_hwm() { { echo 5 > "/proc/$1/clear_refs"; } 2>/dev/null || true; }

# stop_pids PID...: SIGTERM, then SIGKILL to whatever still runs after STOP_S seconds (default 30), then waits for
# each (the sourcing shell's own children).
stop_pids() {
    kill -TERM "$@" 2>/dev/null || true
    local i p alive
    for i in $(seq $((${STOP_S:-30} * 10))); do
        alive=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 1 ] || break
        sleep 0.1
    done
    kill -KILL "$@" 2>/dev/null || true
    wait "$@" 2>/dev/null || true
}

# write_mm2_properties FILE TOPICS [EXTRA]: MirrorMaker 2's dedicated-mode configuration, the same for every bench
# that compares with it (tools/bench/mm2.sh, tools/bench/catchup_e2e.sh): one direction, SRC_BOOT -> TGT_BOOT,
# Kafka's defaults except what a single-broker pair needs (replication factor 1), the identity replication policy
# (the target topic keeps the source's name), lz4 on the target as on the source, and one task per partition
# (PARTITIONS). EXTRA: lines appended (tuning given to a run).
write_mm2_properties() {
    cat > "$1" <<EOF
clusters = source, target
source.bootstrap.servers = $SRC_BOOT
target.bootstrap.servers = $TGT_BOOT
source->target.enabled = true
target->source.enabled = false
source->target.topics = $2
replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
tasks.max = $PARTITIONS
replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset-syncs.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
target.producer.compression.type = lz4
EOF
    [ -z "${3:-}" ] || printf '# tuning given to this run\n%s\n' "$3" >> "$1"
}

# start_mm2 PROPERTIES LOG: MirrorMaker 2's dedicated driver (MM2_HOME/libs) in the background; sets MM2_PID.
start_mm2() {
    java -Xms256M -Xmx2G -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
        -Dlog4j2.configurationFile="$ROOT/tests/kafka/broker-log4j2.properties" -cp "$MM2_HOME/libs/*" \
        org.apache.kafka.connect.mirror.MirrorMaker "$1" > "$2" 2>&1 &
    MM2_PID=$!
}

# bench_certs DIR: test certificates for a segmirror pair, one CA and a leaf per side (ship, apply; name localhost)
# for mutual TLS.
bench_certs() {
    mkdir -p "$1"
    (
        cd "$1"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
            -keyout ca.key -out ca.crt 2>/dev/null
        for side in ship apply; do
            openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$side" \
                -keyout "$side.key.ec" -out "$side.csr" 2>/dev/null
            openssl pkcs8 -topk8 -nocrypt -in "$side.key.ec" -out "$side.key"
            printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n' > "$side.ext"
            openssl x509 -req -in "$side.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
                -extfile "$side.ext" -out "$side.crt" 2>/dev/null
        done
    )
}

# start_broker DIR: a single-node KRaft broker (broker and controller in one JVM, 1 GiB heap, Kafka's defaults but
# no auto-created topics) with its log dir in DIR/data, in the background. Sets BROKER_PID, BROKER_BOOTSTRAP and
# BROKER_LOG_DIR, appends the pid to PIDS and returns once the broker answers a metadata request.
start_broker() {
    local dir="$1" port controller
    port=$(free_port) controller=$(free_port)
    BROKER_LOG_DIR="$dir/data"
    # BROKER_DATA_ROOT (say /dev/shm): the log dir on a filesystem of its own, as a broker on another machine has.
    # On one ext4 filesystem, the kernel writing back a broker's pages makes the mirror's fsyncs wait for them
    # (the journal commits them in order): see tools/bench/fsync_contention.py.
    if [ -n "${BROKER_DATA_ROOT:-}" ]; then
        BROKER_LOG_DIR="$(mktemp -d "$BROKER_DATA_ROOT/segmirror-bench-broker.XXXXXX")"
        BROKER_DATA_DIRS+=("$BROKER_LOG_DIR")
    fi
    mkdir -p "$BROKER_LOG_DIR"
    cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
log.dirs=$BROKER_LOG_DIR
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
auto.create.topics.enable=false
PROPS
    local cluster_id
    cluster_id=$(python3 -c 'import base64, uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')
    java_cp 256 kafka.tools.StorageTool format "--cluster-id=$cluster_id" --config "$dir/server.properties" \
        > "$dir/format.out" 2>&1
    java -Xmx1g -Xms1g -XX:+UseG1GC -Dkafka.logs.dir="$dir" \
        -Dlog4j2.configurationFile="$ROOT/tests/kafka/broker-log4j2.properties" \
        -cp "$KAFKA_HOME/libs/*" kafka.Kafka "$dir/server.properties" > "$dir/stdout" 2>&1 &
    BROKER_PID=$!
    PIDS+=("$BROKER_PID")
    BROKER_BOOTSTRAP="127.0.0.1:$port"
    local i
    for i in $(seq 240); do
        python3 - "$BROKER_BOOTSTRAP" <<'PY' 2>/dev/null && return
import sys
from confluent_kafka.admin import AdminClient
a = AdminClient({"bootstrap.servers": sys.argv[1]})
sys.exit(0 if a.list_topics(timeout=2).brokers else 1)
PY
        sleep 0.5
    done
    echo "the broker in $dir did not start (see $dir/stdout)" >&2
    exit 1
}

# create_topic BOOTSTRAP LOG_DIR TOPIC [PARTITIONS]: creates the topic (replication factor 1) and waits for its
# partition dirs in LOG_DIR.
create_topic() {
    local partitions="${4:-1}"
    python3 - "$1" "$3" "$partitions" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": sys.argv[1]})
for f in a.create_topics([NewTopic(sys.argv[2], int(sys.argv[3]), 1)]).values():
    f.result(30)
PY
    local p i
    for p in $(seq 0 $((partitions - 1))); do
        for i in $(seq 200); do [ -f "$2/$3-$p/00000000000000000000.log" ] && continue 2; sleep 0.05; done
        echo "topic $3 has no partition dir $3-$p in $2" >&2
        exit 1
    done
}

# drop_caches: dirty pages written back, then the page cache dropped where permitted (root); a no-op drop otherwise.
drop_caches() { sync; { echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null || true; }

# cold_promote WORK SEGMIRROR ARGS...: `segmirror promote ARGS... --json` from a cold page cache: `sync`, the cache
# dropped when DROP_CACHES=1 (root only), then timed by /usr/bin/time. Prints "wall_s cpu_s batches_restamped"
# (CPU = user + sys); the report stays in WORK/report.json.
cold_promote() {
    local work="$1" bin="$2" wall user sys
    shift 2
    if [ "${DROP_CACHES:-1}" = 1 ]; then drop_caches; else sync; fi
    /usr/bin/time -f "%e %U %S" -o "$work/time" "$bin" promote "$@" --json > "$work/report.json"
    read -r wall user sys < "$work/time"
    python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(sys.argv[2], round(float(sys.argv[3]) + float(sys.argv[4]), 2),
      sum(p.get("batches_restamped", 0) for p in r["partitions"]))' "$work/report.json" "$wall" "$user" "$sys"
}

# cut_timestamp DIR BATCHES: a consistent cut's timestamp BATCHES batches before the end of the mirror partition DIR
# (its last segment's batches are walked header by header, and the segment's before it when the last holds fewer; in
# the benchmarks' data the max timestamp rises by one ms per batch or per offset). Prints the max timestamp of the
# batch that many before the last.
cut_timestamp() {
    python3 - "$1" "$2" <<'PY'
import os, struct, sys
d, back = sys.argv[1], int(sys.argv[2])
logs = sorted(f for f in os.listdir(d) if f.endswith(".log"))
stamps = []
# The last segment, and the one before when the last holds too few batches.
for name in reversed(logs[-2:]):
    if len(stamps) > back:
        break
    found = []
    with open(os.path.join(d, name), "rb") as f:
        size, pos = os.fstat(f.fileno()).st_size, 0
        while pos + 61 <= size:
            f.seek(pos)
            h = f.read(61)
            length = struct.unpack(">i", h[8:12])[0]
            found.append(struct.unpack(">q", h[35:43])[0])
            pos += 12 + length
    stamps = found + stamps
print(stamps[max(0, len(stamps) - 1 - back)])
PY
}
