//! `segmirror status`: what the catalog says — every link, every mirror partition, what is installed, and the last
//! thing that happened to it. Read-only: it never creates or changes a catalog, and (SQLite WAL) never blocks a
//! running `segmirror apply`.
//!
//! Which catalog: `--catalog PATH`; else `--mirror DIR`'s default catalog; else every catalog in the data directory
//! (one per mirror root, see `segmirror_catalog::default_catalog_for_mirror`), so that a host with several mirrors
//! shows them all without the user knowing where each catalog lives.
//!
//! For a tailed mirror it adds the tail replication lag per partition (`status_tail`): the catalog knows only what is
//! installed, so the source's side comes from the shipper's last progress report, recorded by the applier.
//!
//! With `--bucket` it also reads each bucket link's store (`segmirror_service::bucket_ends`, the reading `apply
//! --follow`'s `/metrics` and the failover's drain make): per partition the newest version shipped, and the lag of what is
//! installed behind it in offsets and seconds. Opt-in, because it is the one part that leaves the catalog: a
//! listing and a manifest read per partition of an S3 bucket.
//!
//! The figures are read by `segmirror_service::status` (a [`StatusDoc`] per catalog); this module takes the flags
//! and prints them as a table or JSON.
//!
//! Exit status: 0, or 2 when the catalog cannot be read.

use std::path::PathBuf;
use std::process::ExitCode;

use segmirror_catalog::{Event, Status};
use segmirror_service::status::{self as figures, bucket_lags, status_doc, BucketLink, StatusDoc};

use crate::cli::catalog::CATALOG_HELP;
use crate::cli::direct_lag as status_tail;
use crate::cli::runtime::Runtime;
use crate::cli::store::S3Args;

/// How `status` finds catalogs, shown under its `--help`.
const STATUS_HELP: &str = "\
Which catalog: --catalog PATH; else --mirror DIR's default catalog; else every catalog in the data directory \
(the data directory's catalog.sqlite, then mirrors/*/catalog.sqlite), each under a `catalog ... (mirror root ...)` \
header. With --json and several catalogs the output is a JSON array of documents, with one catalog a single \
document.";

#[derive(clap::Args)]
#[command(after_help = format!("{STATUS_HELP}\n\n{}\n\n{CATALOG_HELP}", crate::cli::direct_lag::TAIL_LAG_HELP))]
pub struct Args {
    /// The catalog to read. See below for the default.
    #[arg(long, value_name = "PATH", conflicts_with = "mirror")]
    catalog: Option<PathBuf>,
    /// Show the catalog of this mirror root (`segmirror apply --mirror`).
    #[arg(long, value_name = "DIR")]
    mirror: Option<PathBuf>,
    /// Print one JSON document (every field of every link and partition, with its last event) instead of a table.
    #[arg(long)]
    json: bool,
    /// Also read each active or paused bucket link's store (the URL its catalog record names): per partition the
    /// newest version shipped, and the lag of what is installed behind it, in offsets and in seconds since that
    /// version's upload (as `apply --follow`'s /metrics). Without it only the catalog is read.
    #[arg(long)]
    bucket: bool,
    /// Key prefix inside the bucket links' stores, as given to `segmirror apply --prefix` (with --bucket).
    #[arg(long, value_name = "P", default_value = "", requires = "bucket")]
    prefix: String,
    #[command(flatten)]
    s3: S3Args,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let paths = figures::catalog_paths(args.catalog.clone(), args.mirror.clone())?;
    let mut docs = Vec::new();
    let mut tables = String::new();
    let runtime = Runtime::new();
    for path in &paths {
        let catalog = figures::open(path)?;
        let status = catalog.status()?;
        let mut doc = status_doc(&catalog, path, &status)?;
        if args.bucket {
            doc.bucket = Some(bucket_lags(&args.s3.options(), &args.prefix, &status, &runtime));
        }
        if !tables.is_empty() {
            tables.push('\n');
        }
        tables.push_str(&render_table(&doc, &status));
        docs.push(serde_json::to_value(&doc)?);
    }
    if args.json {
        let out = match <[_; 1]>::try_from(docs) {
            Ok([one]) => one,
            Err(many) => serde_json::Value::Array(many),
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{tables}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The `--bucket` section of the table.
fn render_bucket(links: &[BucketLink]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for link in links {
        let _ = writeln!(out, "\nbucket of link {} ({}):", link.link, link.store_url);
        if let Some(error) = &link.error {
            let _ = writeln!(out, "  cannot be read: {error}");
            continue;
        }
        if link.partitions.is_empty() {
            let _ = writeln!(out, "  no versions shipped yet");
            continue;
        }
        let _ = writeln!(
            out,
            "  {:<32} {:>14} {:>14} {:>12} {:>8}",
            "partition", "shipped end", "installed end", "lag offsets", "lag s"
        );
        for p in &link.partitions {
            let _ = writeln!(
                out,
                "  {:<32} {:>14} {:>14} {:>12} {:>8}",
                format!("{}-{}", p.topic, p.partition),
                p.shipped_end_offset,
                p.installed_end_offset.map_or("-".to_string(), |o| o.to_string()),
                p.lag_offsets,
                p.lag_seconds
            );
        }
    }
    out
}

/// The table `segmirror status` prints.
fn render_table(doc: &StatusDoc<'_>, status: &Status) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    match &doc.mirror_root {
        Some(root) => {
            let _ = writeln!(
                out,
                "catalog {} (mirror root {})",
                doc.catalog.display(),
                root.display()
            );
        }
        None => {
            let _ = writeln!(out, "catalog {} (no mirror root recorded yet)", doc.catalog.display());
        }
    }
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
            let s = &p.partition;
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
    // Below the table (its columns stay as they are): promoted partitions whose mirror files are gone.
    for link in &doc.links {
        for p in &link.partition_docs {
            let s = &p.partition;
            if !p.promoted_into.is_empty() {
                let _ = writeln!(
                    out,
                    "{}/{}-{}: promoted into {} log dir(s): {}",
                    link.link.name,
                    s.topic,
                    s.partition,
                    p.promoted_into.len(),
                    p.promoted_into.join(", ")
                );
            }
            if let Some(dir) = &s.handed_over_to {
                let _ = writeln!(
                    out,
                    "{}/{}-{}: promoted by handing the mirror's files over (renamed) into {dir}; the mirror no longer \
                     holds them",
                    link.link.name, s.topic, s.partition
                );
            }
        }
    }
    out.push_str(&status_tail::render(
        &doc.tail,
        u64::try_from(doc.generated_at_ms).unwrap_or(0),
    ));
    out.push_str(&status_tail::render_truncations(&doc.truncations));
    if let Some(bucket) = &doc.bucket {
        out.push_str(&render_bucket(bucket));
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
    use segmirror_catalog::{Catalog, LinkSpec, PartitionKey, PartitionState, SegmentVersion, Upsert};

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
        let doc = status_doc(&catalog, &path, &status).unwrap();
        assert_eq!(doc.mirror_root, None);
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
