#!/usr/bin/env bash
# Installs what the segmirror test suite needs besides Rust: a stock Apache Kafka (jars from Maven Central), kcat,
# and the Python clients (confluent-kafka, moto's S3 server). Idempotent: every step checks first and does nothing
# when its result is already there, so a second run takes well under a second.
#
# Kafka versions: the default one is pinned in tests/kafka/kafka.version (one line); the cross-version tests also
# need every version listed in tests/kafka/kafka-compat.versions (one a line). Each version's jars go to
# .cache/kafka/<version>/libs at the repository root, completed by a marker file of its own, so adding a version
# fetches only that one.
#
# Prints `export SEGMIRROR_KAFKA_HOME=...` (the pinned version) at the end; scripts/test-all.sh sets it for cargo.
# The harness finds the other versions next to it (.cache/kafka/<version>).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_VERSION="$(tr -d '[:space:]' < "$ROOT/tests/kafka/kafka.version")"
KAFKA_HOME="$ROOT/.cache/kafka/$KAFKA_VERSION"
# Comments (#...) and blank lines are skipped.
COMPAT_VERSIONS="$(sed -e 's/#.*//' "$ROOT/tests/kafka/kafka-compat.versions" | tr -s '[:space:]' ' ')"

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
install_kafka() {
    local version="$1"
    local home="$ROOT/.cache/kafka/$version"
    local marker="$home/.complete"
    if [ -f "$marker" ]; then
        say "kafka $version: present in $home"
        return
    fi
    # Kafka 3.x brings its own slf4j binding (reload4j); the pom's default log4j2 binding is for 4.x only.
    local profile=()
    case "$version" in
        3.*) profile=(-P kafka3) ;;
    esac
    say "kafka $version: fetching kafka_2.13, kafka-tools, kafka-clients and dependencies into $home/libs"
    rm -rf "$home"
    mkdir -p "$home"
    mvn -q -B -Dstyle.color=never -f "$ROOT/tests/kafka/pom.xml" -Dkafka.version="$version" "${profile[@]}" \
        dependency:copy-dependencies -DoutputDirectory="$home/libs"
    # Smoke check: the broker's main class loads on this JVM (fails on a class-file version mismatch).
    java -Dlog4j.configuration="file:$ROOT/tests/kafka/tools-log4j.properties" \
        -Dlog4j2.configurationFile="$ROOT/tests/kafka/tools-log4j2.properties" \
        -cp "$home/libs/*" kafka.tools.StorageTool random-uuid >/dev/null
    echo "$version" > "$marker"
    say "kafka $version: $(ls "$home/libs" | wc -l) jars"
}

for version in "$KAFKA_VERSION" $COMPAT_VERSIONS; do
    install_kafka "$version"
done

# --- kcat ---------------------------------------------------------------------------------------------------------
if command -v kcat >/dev/null 2>&1; then
    say "kcat: present"
else
    apt_install kcat
fi

# --- Python clients -----------------------------------------------------------------------------------------------
# Checked through installed package metadata in one interpreter (importing moto alone takes over a second), so a
# run with everything present stays well under a second.
need_cmd python3 "install python3"
# moto >= 5.0.15 answers `If-None-Match: *` puts with 412 (getmoto/moto#8109): the lease tests rely on it; its
# server needs the [server] extra (flask, flask-cors).
PY_MISSING="$(python3 - <<'PY'
import importlib.metadata as md
def version(name):
    try:
        return tuple(int(p) for p in md.version(name).split(".")[:3] if p.isdigit())
    except md.PackageNotFoundError:
        return None
missing = []
if version("confluent-kafka") is None:
    missing.append("confluent-kafka")
moto = version("moto")
if moto is None or moto < (5, 0, 15) or version("flask") is None or version("flask-cors") is None:
    missing.append("moto[server]>=5.0.15")
print(" ".join(missing))
PY
)"
case "$PY_MISSING" in
    *confluent-kafka*) pip_install confluent-kafka ;;
    *) say "python confluent-kafka: present" ;;
esac
case "$PY_MISSING" in
    *moto*) pip_install 'moto[server]>=5.0.15' ;;
    *) if command -v moto_server >/dev/null 2>&1; then say "moto_server: present"; else pip_install 'moto[server]>=5.0.15'; fi ;;
esac

say "done; export SEGMIRROR_KAFKA_HOME=$KAFKA_HOME"
