//! Where the test dependencies live: the Kafka jars, the Python client script, kcat.
//!
//! `scripts/install-test-deps.sh` puts the jars of the version pinned in `tests/kafka/kafka.version` into
//! `<repo>/.cache/kafka/<version>/libs`; `scripts/test-all.sh` exports `SEGMIRROR_KAFKA_HOME` pointing there. The
//! harness accepts either, so `cargo test` works after one run of the installer. Nothing here installs anything:
//! a missing dependency is an error that says to run `scripts/test-all.sh`, never a silently skipped test.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};

/// Environment variable naming the Kafka home (the directory holding `libs/`).
pub const KAFKA_HOME_ENV: &str = "SEGMIRROR_KAFKA_HOME";

/// Marker written by the installer once all jars are in place.
const COMPLETE_MARKER: &str = ".complete";

const HOW_TO_INSTALL: &str = "run `scripts/test-all.sh` (or `scripts/install-test-deps.sh`) from the repository root";

/// The Kafka version this repository pins (`tests/kafka/kafka.version`).
pub fn pinned_kafka_version() -> &'static str {
    include_str!("../kafka/kafka.version").trim()
}

/// The workspace root (the parent of this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `tests/kafka/`: the pom and the log4j2 configurations.
pub fn kafka_support_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kafka")
}

/// `tests/python/kafka_client.py`.
pub fn python_client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join("kafka_client.py")
}

/// A located, complete Kafka installation (jars only; started with `java -cp '<libs>/*'`).
#[derive(Debug, Clone)]
pub struct KafkaInstall {
    /// Directory holding `libs/`.
    pub home: PathBuf,
    /// Directory of jars.
    pub libs: PathBuf,
    /// Version of the `kafka_2.13` jar found in `libs`.
    pub version: String,
}

impl KafkaInstall {
    /// Finds the installation from `SEGMIRROR_KAFKA_HOME`, else `<repo>/.cache/kafka/<pinned version>`. Cached per
    /// process.
    pub fn locate() -> Result<&'static KafkaInstall> {
        static FOUND: OnceLock<std::result::Result<KafkaInstall, String>> = OnceLock::new();
        FOUND
            .get_or_init(|| Self::locate_uncached().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    fn locate_uncached() -> Result<KafkaInstall> {
        let home = match std::env::var_os(KAFKA_HOME_ENV) {
            Some(home) => PathBuf::from(home),
            None => repo_root().join(".cache").join("kafka").join(pinned_kafka_version()),
        };
        let libs = home.join("libs");
        if !home.join(COMPLETE_MARKER).is_file() || !libs.is_dir() {
            bail!(
                "Kafka {} is not installed at {} (from ${KAFKA_HOME_ENV} or the default location): {HOW_TO_INSTALL}",
                pinned_kafka_version(),
                home.display()
            );
        }
        let version = std::fs::read_dir(&libs)
            .with_context(|| format!("listing {}", libs.display()))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                Some(name.strip_prefix("kafka_2.13-")?.strip_suffix(".jar")?.to_string())
            })
            .next()
            .with_context(|| format!("no kafka_2.13-*.jar in {}: {HOW_TO_INSTALL}", libs.display()))?;
        require_java()?;
        Ok(KafkaInstall { home, libs, version })
    }

    /// The class path `<libs>/*` (expanded by `java` itself).
    pub fn classpath(&self) -> String {
        format!("{}/*", self.libs.display())
    }

    /// A `java` command with this class path, a small heap and start-up friendly flags, and the given log4j2 file.
    /// The caller appends the main class and its arguments.
    pub fn java(&self, heap_mb: u32, log4j2: &Path) -> Command {
        let mut cmd = Command::new("java");
        cmd.arg(format!("-Xmx{heap_mb}m"))
            .arg("-Xms32m")
            .arg("-XX:+UseSerialGC")
            .arg("-XX:TieredStopAtLevel=1")
            .arg("-Djava.awt.headless=true")
            .arg(format!("-Dlog4j2.configurationFile={}", log4j2.display()))
            .arg("-cp")
            .arg(self.classpath())
            .stdin(Stdio::null());
        cmd
    }
}

fn require_java() -> Result<()> {
    let out = Command::new("java")
        .arg("-version")
        .output()
        .with_context(|| format!("cannot run `java`: {HOW_TO_INSTALL}"))?;
    if !out.status.success() {
        bail!("`java -version` failed: {HOW_TO_INSTALL}");
    }
    Ok(())
}

/// Fails with an install hint unless `kcat` runs.
pub fn require_kcat() -> Result<()> {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok = *OK.get_or_init(|| {
        Command::new("kcat")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !ok {
        bail!("kcat is not installed: {HOW_TO_INSTALL}");
    }
    Ok(())
}

/// Fails with an install hint unless `python3` can import `confluent_kafka`.
pub fn require_python_client() -> Result<()> {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok = *OK.get_or_init(|| {
        Command::new("python3")
            .args(["-c", "import confluent_kafka"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !ok {
        bail!("python3 with confluent-kafka is not available: {HOW_TO_INSTALL}");
    }
    Ok(())
}
