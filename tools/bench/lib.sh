# Helpers shared by the real-broker benchmarks (tools/bench/tail.sh, tools/bench/mm2.sh): sourced, not run.
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
