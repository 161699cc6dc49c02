//! Where the test dependencies live: the Kafka jars, the Python client script, kcat.
//!
//! `scripts/install-test-deps.sh` puts the jars of the version pinned in `tests/kafka/kafka.version` into
//! `<repo>/.cache/kafka/<version>/libs`; `scripts/test-all.sh` exports `SEGMIRROR_KAFKA_HOME` pointing there. The
//! harness accepts either, so `cargo test` works after one run of the installer. Nothing here installs anything:
//! a missing dependency is an error that says to run `scripts/test-all.sh`, never a silently skipped test.
//!
//! Several versions can be installed side by side (the cross-version tests run a Kafka 3.9 broker next to a 4.4
//! one): [`KafkaInstall::locate`] is the pinned default, [`KafkaInstall::version`] any version listed in
//! `tests/kafka/kafka-compat.versions`, found next to the default install. The few things that differ between
//! the versions the harness drives are answered here, so tests do not compare version strings: the topic config
//! that sets a small segment size ([`KafkaInstall::segment_bytes_config`]), the main classes of tools that moved
//! from Scala to Java in 4.0 ([`KafkaInstall::main_class`]), and the logging framework (4.x: log4j2; 3.x:
//! reload4j, a log4j 1.x) — every JVM gets both configuration files and each framework reads its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

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

/// The other Kafka versions the installer fetches for the cross-version tests (`tests/kafka/kafka-compat.versions`,
/// one a line, `#` comments).
pub fn compat_kafka_versions() -> Vec<&'static str> {
    include_str!("../kafka/kafka-compat.versions")
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect()
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

    /// Finds the installation of Kafka `version`: the pinned default is [`locate`](Self::locate); another version
    /// is looked for next to it (the parent of `$SEGMIRROR_KAFKA_HOME`, named `<version>`), then in
    /// `<repo>/.cache/kafka/<version>`. The jar found must be that version. Cached per process and version.
    pub fn version(version: &str) -> Result<&'static KafkaInstall> {
        if version == pinned_kafka_version() {
            return Self::locate();
        }
        static FOUND: OnceLock<Mutex<BTreeMap<String, &'static KafkaInstall>>> = OnceLock::new();
        let mut found = FOUND
            .get_or_init(|| Mutex::new(BTreeMap::new()))
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(install) = found.get(version) {
            return Ok(install);
        }
        let mut candidates = Vec::new();
        if let Some(parent) =
            std::env::var_os(KAFKA_HOME_ENV).and_then(|h| PathBuf::from(h).parent().map(Path::to_path_buf))
        {
            candidates.push(parent.join(version));
        }
        candidates.push(repo_root().join(".cache").join("kafka").join(version));
        let home = candidates
            .iter()
            .find(|home| home.join(COMPLETE_MARKER).is_file())
            .cloned()
            .unwrap_or_else(|| candidates[candidates.len() - 1].clone());
        let install = Self::at(home, version)?;
        if install.version != version {
            bail!(
                "{} holds Kafka {}, not {version}: {HOW_TO_INSTALL}",
                install.libs.display(),
                install.version
            );
        }
        let install: &'static KafkaInstall = Box::leak(Box::new(install));
        found.insert(version.to_string(), install);
        Ok(install)
    }

    fn locate_uncached() -> Result<KafkaInstall> {
        let home = match std::env::var_os(KAFKA_HOME_ENV) {
            Some(home) => PathBuf::from(home),
            None => repo_root().join(".cache").join("kafka").join(pinned_kafka_version()),
        };
        Self::at(home, pinned_kafka_version())
    }

    /// The installation in `home` (`wanted` only names it in the error when it is missing).
    fn at(home: PathBuf, wanted: &str) -> Result<KafkaInstall> {
        let libs = home.join("libs");
        if !home.join(COMPLETE_MARKER).is_file() || !libs.is_dir() {
            bail!(
                "Kafka {wanted} is not installed at {} (from ${KAFKA_HOME_ENV} or the default location): \
                 {HOW_TO_INSTALL}",
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

    /// The major version (`3` for 3.9.1), 0 if the version string does not start with a number.
    pub fn major(&self) -> u32 {
        self.version.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0)
    }

    /// The topic config that sets the segment size below 1 MiB: Kafka 4.0 raised the minimum of `segment.bytes`
    /// to 1 MiB and added `internal.segment.bytes` (no minimum) for tests; Kafka 3.x accepts small values in
    /// `segment.bytes` itself and rejects the internal key as unknown.
    pub fn segment_bytes_config(&self) -> &'static str {
        if self.major() >= 4 {
            "internal.segment.bytes"
        } else {
            "segment.bytes"
        }
    }

    /// The main class of a tool on this version, given its Kafka 4.x name (the constants in [`crate::tools`]):
    /// `ConfigCommand`, `ConsoleProducer` and `DumpLogSegments` were Scala classes in Kafka 3.x.
    pub fn main_class<'a>(&self, class_4x: &'a str) -> &'a str {
        if self.major() >= 4 {
            return class_4x;
        }
        match class_4x {
            crate::tools::CONFIG_COMMAND => "kafka.admin.ConfigCommand",
            crate::tools::CONSOLE_PRODUCER => "kafka.tools.ConsoleProducer",
            crate::tools::DUMP_LOG_SEGMENTS => "kafka.tools.DumpLogSegments",
            other => other,
        }
    }

    /// The class path `<libs>/*` (expanded by `java` itself).
    pub fn classpath(&self) -> String {
        format!("{}/*", self.libs.display())
    }

    /// A `java` command with this class path, a small heap and start-up friendly flags, and the given log4j2 file
    /// (`<name>-log4j2.properties`; its log4j 1.x twin `<name>-log4j.properties`, when there is one, is passed
    /// too, for Kafka 3.x). The caller appends the main class and its arguments.
    pub fn java(&self, heap_mb: u32, log4j2: &Path) -> Command {
        let mut cmd = Command::new("java");
        cmd.arg(format!("-Xmx{heap_mb}m"))
            .arg("-Xms32m")
            .arg("-XX:+UseSerialGC")
            .arg("-XX:TieredStopAtLevel=1")
            .arg("-Djava.awt.headless=true")
            .arg(format!("-Dlog4j2.configurationFile={}", log4j2.display()));
        if let Some(log4j1) = log4j1_twin(log4j2) {
            cmd.arg(format!("-Dlog4j.configuration=file:{}", log4j1.display()));
        }
        cmd.arg("-cp").arg(self.classpath()).stdin(Stdio::null());
        cmd
    }
}

/// `<dir>/<name>-log4j.properties` for `<dir>/<name>-log4j2.properties`, if that file exists.
fn log4j1_twin(log4j2: &Path) -> Option<PathBuf> {
    let name = log4j2.file_name()?.to_str()?;
    let twin = log4j2.with_file_name(name.strip_suffix("-log4j2.properties")?.to_string() + "-log4j.properties");
    twin.is_file().then_some(twin)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn install(version: &str) -> KafkaInstall {
        KafkaInstall {
            home: PathBuf::from("/nowhere"),
            libs: PathBuf::from("/nowhere/libs"),
            version: version.to_string(),
        }
    }

    #[test]
    fn version_differences_are_answered_by_major_version() {
        let (old, new) = (install("3.9.1"), install("4.4.0"));
        assert_eq!((old.major(), new.major()), (3, 4));
        assert_eq!(old.segment_bytes_config(), "segment.bytes");
        assert_eq!(new.segment_bytes_config(), "internal.segment.bytes");
        assert_eq!(
            old.main_class(crate::tools::DUMP_LOG_SEGMENTS),
            "kafka.tools.DumpLogSegments"
        );
        assert_eq!(
            old.main_class(crate::tools::CONFIG_COMMAND),
            "kafka.admin.ConfigCommand"
        );
        assert_eq!(
            old.main_class(crate::tools::CONSOLE_PRODUCER),
            "kafka.tools.ConsoleProducer"
        );
        assert_eq!(old.main_class(crate::tools::TOPIC_COMMAND), crate::tools::TOPIC_COMMAND);
        assert_eq!(
            new.main_class(crate::tools::DUMP_LOG_SEGMENTS),
            crate::tools::DUMP_LOG_SEGMENTS
        );
    }

    #[test]
    fn compat_versions_are_listed_and_differ_from_the_pinned_one() {
        let versions = compat_kafka_versions();
        assert!(!versions.is_empty());
        assert!(versions
            .iter()
            .all(|v| *v != pinned_kafka_version() && !v.contains(' ')));
    }

    #[test]
    fn every_log4j2_config_has_its_log4j1_twin() {
        for name in ["broker", "tools"] {
            let log4j2 = kafka_support_dir().join(format!("{name}-log4j2.properties"));
            assert_eq!(
                log4j1_twin(&log4j2),
                Some(kafka_support_dir().join(format!("{name}-log4j.properties")))
            );
        }
        assert_eq!(log4j1_twin(Path::new("/nowhere/x-log4j2.properties")), None);
        assert_eq!(log4j1_twin(Path::new("/nowhere/log4j2.xml")), None);
    }
}
