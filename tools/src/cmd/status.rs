//! `segmirror status`: what the catalog says — every link, every mirror partition, what is installed, and the last
//! thing that happened to it. Read-only: it never creates or changes a catalog, and (SQLite WAL) never blocks a
//! running `segmirror apply`.
//!
//! Exit status: 0, or 2 when the catalog cannot be read.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use segment_format::dir::META_PROPERTIES_FILE;
use segmirror_catalog::{Catalog, Event, LinkStatus, PartitionKey, PartitionStatus, Status, Subject};
use serde::Serialize;

/// The default catalog location, shown under `--help` of every command that takes `--catalog`.
pub const CATALOG_HELP: &str = "\
Catalog: --catalog PATH, else $SEGMIRROR_HOME/catalog.sqlite, else $XDG_DATA_HOME/segmirror/catalog.sqlite, \
else ~/.local/share/segmirror/catalog.sqlite. Never inside a broker log dir: a broker takes every directory there \
for a partition, and the catalog must outlive the mirror data it describes.";

#[derive(clap::Args)]
#[command(after_help = CATALOG_HELP)]
pub struct Args {
    /// The catalog to read. See below for the default.
    #[arg(long, value_name = "PATH")]
    catalog: Option<PathBuf>,
    /// Print one JSON document (every field of every link and partition, with its last event) instead of a table.
    #[arg(long)]
    json: bool,
}

/// `--catalog`, or the default; refused inside a broker log dir.
pub fn catalog_path(arg: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let path = match arg {
        Some(path) => path,
        None => segmirror_catalog::default_catalog_path()
            .context("no catalog location: set --catalog, SEGMIRROR_HOME or HOME")?,
    };
    if let Some(dir) = path.parent().filter(|d| d.join(META_PROPERTIES_FILE).exists()) {
        bail!(
            "catalog {} would be inside a Kafka log dir ({} holds {META_PROPERTIES_FILE}); choose another --catalog",
            path.display(),
            dir.display()
        );
    }
    Ok(path)
}

/// The JSON document: the catalog's status with each partition's last event.
#[derive(Serialize)]
struct StatusDoc<'a> {
    catalog: &'a Path,
    schema_version: u32,
    generated_at_ms: i64,
    links: Vec<LinkDoc<'a>>,
}

/// A link: the fields of [`LinkStatus`] (its partitions with their last events) and its own last event.
#[derive(Serialize)]
struct LinkDoc<'a> {
    #[serde(skip)]
    link: &'a LinkStatus,
    name: &'a str,
    state: segmirror_catalog::LinkState,
    store_url: &'a str,
    topics_regex: &'a str,
    groups_regex: Option<&'a str>,
    created_at_ms: i64,
    last_event_at_ms: Option<i64>,
    last_event: Option<Event>,
    #[serde(rename = "partitions")]
    partition_docs: Vec<PartitionDoc<'a>>,
}

impl<'a> LinkDoc<'a> {
    fn new(link: &'a LinkStatus, last_event: Option<Event>, partition_docs: Vec<PartitionDoc<'a>>) -> Self {
        LinkDoc {
            link,
            name: &link.name,
            state: link.state,
            store_url: &link.store_url,
            topics_regex: &link.topics_regex,
            groups_regex: link.groups_regex.as_deref(),
            created_at_ms: link.created_at_ms,
            last_event_at_ms: link.last_event_at_ms,
            last_event,
            partition_docs,
        }
    }
}

#[derive(Serialize)]
struct PartitionDoc<'a> {
    #[serde(flatten)]
    partition: &'a PartitionStatus,
    last_event: Option<Event>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let path = catalog_path(args.catalog)?;
    if !path.exists() {
        bail!(
            "no catalog at {} (nothing applied yet? `segmirror apply` creates it)",
            path.display()
        );
    }
    let catalog = Catalog::open(&path).with_context(|| format!("opening catalog {}", path.display()))?;
    let status = catalog.status()?;
    let mut links = Vec::new();
    for link in &status.links {
        let last_event = catalog.events(Some(Subject::Link(&link.name)), 1)?.into_iter().next();
        let mut partition_docs = Vec::new();
        for p in &link.partitions {
            let key = PartitionKey::new(link.name.clone(), p.topic.clone(), p.partition);
            let last_event = catalog.events(Some(Subject::Partition(&key)), 1)?.into_iter().next();
            partition_docs.push(PartitionDoc {
                partition: p,
                last_event,
            });
        }
        links.push(LinkDoc::new(link, last_event, partition_docs));
    }
    let doc = StatusDoc {
        catalog: &path,
        schema_version: status.schema_version,
        generated_at_ms: status.generated_at_ms,
        links,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", render_table(&doc, &status));
    }
    Ok(ExitCode::SUCCESS)
}

/// The table `segmirror status` prints.
fn render_table(doc: &StatusDoc<'_>, status: &Status) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "catalog {}", doc.catalog.display());
    if status.links.is_empty() {
        let _ = writeln!(out, "no links yet");
        return out;
    }
    let _ = writeln!(
        out,
        "{:<16} {:<32} {:<10} {:>8} {:>14} {:>10}  last event",
        "link", "partition", "state", "segments", "end offset", "bytes"
    );
    for link in &doc.links {
        if link.partition_docs.is_empty() {
            let event = link.last_event.as_ref().map_or("-".to_string(), describe);
            let _ = writeln!(
                out,
                "{:<16} {:<32} {:<10} {:>8} {:>14} {:>10}  {event}",
                link.link.name, "-", link.link.state, "-", "-", "-"
            );
        }
        for p in &link.partition_docs {
            let s = p.partition;
            let segments = if s.segments_pending > 0 {
                format!("{}+{}", s.segments_installed, s.segments_pending)
            } else {
                s.segments_installed.to_string()
            };
            let _ = writeln!(
                out,
                "{:<16} {:<32} {:<10} {:>8} {:>14} {:>10}  {}",
                link.link.name,
                format!("{}-{}", s.topic, s.partition),
                s.state,
                segments,
                s.installed_end_offset.map_or("-".to_string(), |o| o.to_string()),
                human_bytes(s.bytes_installed),
                p.last_event.as_ref().map_or("-".to_string(), describe)
            );
        }
    }
    out
}

/// `kind at time: detail`, the detail cut to one short line.
fn describe(e: &Event) -> String {
    const MAX_DETAIL: usize = 80;
    let mut detail: String = e.detail.chars().take(MAX_DETAIL).collect();
    if e.detail.chars().count() > MAX_DETAIL {
        detail.push('…');
    }
    format!("{} {}: {detail}", e.kind, utc(e.at_ms))
}

/// Bytes in powers of 1024 with one decimal.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = UNITS[0];
    for next in &UNITS[1..] {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    format!("{value:.1} {unit}")
}

/// Milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian, UTC).
fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use segmirror_catalog::{LinkSpec, PartitionState, SegmentVersion, Upsert};

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_735_689_600_000), "2025-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400_000 + 3_723_000), "2000-02-29T01:02:03Z");
        assert_eq!(utc(-1_000), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn bytes_are_human() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 << 30), "5.0 GiB");
    }

    #[test]
    fn a_catalog_inside_a_log_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(META_PROPERTIES_FILE), b"version=1\n").unwrap();
        assert!(catalog_path(Some(dir.path().join("catalog.sqlite"))).is_err());
        let ok = dir.path().join("elsewhere/catalog.sqlite");
        assert_eq!(catalog_path(Some(ok.clone())).unwrap(), ok);
    }

    #[test]
    fn the_table_shows_each_partition_with_its_last_event() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        let mut catalog = Catalog::open(&path).unwrap();
        catalog
            .create_link(&LinkSpec {
                name: "east".into(),
                store_url: "file:///bucket".into(),
                topics_regex: ".*".into(),
                groups_regex: None,
            })
            .unwrap();
        catalog
            .create_link(&LinkSpec {
                name: "west".into(),
                store_url: "file:///bucket".into(),
                topics_regex: ".*".into(),
                groups_regex: None,
            })
            .unwrap();
        let key = PartitionKey::new("east", "orders", 0);
        let Upsert::Created(p) = catalog.upsert_partition(&key, "src", 0).unwrap() else {
            panic!("created")
        };
        catalog
            .mark_installed(
                p.id,
                "src",
                &SegmentVersion {
                    base_offset: 0,
                    next_offset: 120,
                    last_offset: 119,
                    size: 3 << 20,
                    sha256: [0; 32],
                    manifest_key: "m".into(),
                    sealed: true,
                },
            )
            .unwrap();
        let other = PartitionKey::new("east", "orders", 1);
        let Upsert::Created(q) = catalog.upsert_partition(&other, "src", 0).unwrap() else {
            panic!("created")
        };
        catalog.set_partition_state(q.id, PartitionState::Paused).unwrap();
        let status = catalog.status().unwrap();
        let links: Vec<LinkDoc<'_>> = status
            .links
            .iter()
            .map(|link| {
                let partition_docs = link
                    .partitions
                    .iter()
                    .map(|p| PartitionDoc {
                        partition: p,
                        last_event: catalog
                            .events(
                                Some(Subject::Partition(&PartitionKey::new(
                                    link.name.clone(),
                                    p.topic.clone(),
                                    p.partition,
                                ))),
                                1,
                            )
                            .unwrap()
                            .pop(),
                    })
                    .collect();
                let last_event = catalog.events(Some(Subject::Link(&link.name)), 1).unwrap().pop();
                LinkDoc::new(link, last_event, partition_docs)
            })
            .collect();
        let doc = StatusDoc {
            catalog: &path,
            schema_version: status.schema_version,
            generated_at_ms: status.generated_at_ms,
            links,
        };
        let table = render_table(&doc, &status);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].starts_with("link"), "{table}");
        assert!(
            lines[2].contains("orders-0") && lines[2].contains("mirroring"),
            "{table}"
        );
        assert!(lines[2].contains(" 120 ") && lines[2].contains("3.0 MiB"), "{table}");
        assert!(lines[2].contains("segment_installed"), "{table}");
        assert!(lines[3].contains("orders-1") && lines[3].contains("paused"), "{table}");
        assert!(lines[3].contains("partition_state_changed"), "{table}");
        assert!(
            lines[4].starts_with("west") && lines[4].contains("link_created"),
            "{table}"
        );
        let json = serde_json::to_value(&doc).unwrap();
        assert_eq!(json["links"][0]["partitions"][0]["installed_end_offset"], 120);
        assert_eq!(
            json["links"][0]["partitions"][0]["last_event"]["kind"],
            "segment_installed"
        );
        assert_eq!(json["links"][0]["name"], "east");
        assert_eq!(json["links"][0]["partitions"].as_array().unwrap().len(), 2);
        assert_eq!(json["links"][1]["last_event"]["kind"], "link_created");
    }
}
