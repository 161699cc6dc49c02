#!/usr/bin/env bash
# Installs what the segmirror test suite needs besides Rust: a stock Apache Kafka (jars from Maven Central), kcat,
# and the Python clients (confluent-kafka, moto's S3 server). Idempotent: every step checks first and does nothing
# when its result is already there, so a second run takes well under a second.
#
# The Kafka version is pinned in tests/kafka/kafka.version (one line); the jars go to
# .cache/kafka/<version>/libs at the repository root, completed by a marker file.
#
# Prints `export SEGMIRROR_KAFKA_HOME=...` at the end; scripts/test-all.sh sets it for cargo.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_VERSION="$(tr -d '[:space:]' < "$ROOT/tests/kafka/kafka.version")"
KAFKA_HOME="$ROOT/.cache/kafka/$KAFKA_VERSION"
MARKER="$KAFKA_HOME/.complete"

say() { printf '[install-test-deps] %s\n' "$*"; }

need_cmd() {
    if ! command -v "$1" >/dev/null 2>&1; then
        say "error: '$1' is required but not installed ($2)"
        exit 1
    fi
}

APT_UPDATED=0
apt_install() {
    if [ "$APT_UPDATED" = 0 ]; then
        say "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        APT_UPDATED=1
    fi
    say "apt-get install -y $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

pip_install() {
    say "pip install $*"
    # Debian's own python3 refuses system-wide installs (PEP 668); pyenv/venv pythons accept the plain form.
    python3 -m pip install --quiet --disable-pip-version-check "$@" 2>/dev/null \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "$@"
}

# --- Java + Maven (the broker needs Java 17+) -------------------------------------------------------------------
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    apt_install openjdk-17-jre-headless maven
fi
JAVA_MAJOR="$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)"
if [ -z "$JAVA_MAJOR" ] || [ "$JAVA_MAJOR" -lt 17 ]; then
    say "error: Kafka $KAFKA_VERSION needs Java 17 or newer, found: $(java -version 2>&1 | head -n1)"
    exit 1
fi

# --- Kafka jars ---------------------------------------------------------------------------------------------------
if [ -f "$MARKER" ]; then
    say "kafka $KAFKA_VERSION: present in $KAFKA_HOME"
else
    say "kafka $KAFKA_VERSION: fetching kafka_2.13, kafka-tools, kafka-clients and dependencies into $KAFKA_HOME/libs"
    rm -rf "$KAFKA_HOME"
    mkdir -p "$KAFKA_HOME"
    mvn -q -B -Dstyle.color=never -f "$ROOT/tests/kafka/pom.xml" -Dkafka.version="$KAFKA_VERSION" \
        dependency:copy-dependencies -DoutputDirectory="$KAFKA_HOME/libs"
    # Smoke check: the broker's main class loads on this JVM (fails on a class-file version mismatch).
    java -cp "$KAFKA_HOME/libs/*" kafka.tools.StorageTool random-uuid >/dev/null
    echo "$KAFKA_VERSION" > "$MARKER"
    say "kafka $KAFKA_VERSION: $(ls "$KAFKA_HOME/libs" | wc -l) jars"
fi

# --- kcat ---------------------------------------------------------------------------------------------------------
if command -v kcat >/dev/null 2>&1; then
    say "kcat: present"
else
    apt_install kcat
fi

# --- Python clients -----------------------------------------------------------------------------------------------
need_cmd python3 "install python3"
if python3 -c 'import confluent_kafka' >/dev/null 2>&1; then
    say "python confluent-kafka: present"
else
    pip_install confluent-kafka
fi
# moto >= 5.0.15 answers `If-None-Match: *` puts with 412 (getmoto/moto#8109): the lease tests rely on it.
if moto_server --help >/dev/null 2>&1 && python3 -c '
import sys, moto
v = tuple(int(p) for p in moto.__version__.split(".")[:3] if p.isdigit())
sys.exit(0 if v >= (5, 0, 15) else 1)' >/dev/null 2>&1; then
    say "moto_server: present"
else
    pip_install 'moto[server]>=5.0.15'
fi

say "done; export SEGMIRROR_KAFKA_HOME=$KAFKA_HOME"
