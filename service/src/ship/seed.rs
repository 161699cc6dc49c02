//! Shipping once (`segmirror seed`): what Kafka log dirs hold goes to an object store, to seed a new mirror or
//! catch one up; reruns ship only what is new. Then the link's topics and group offsets, after the segments: a
//! target reading them finds the data they describe at least as far as this seed shipped it (offsets beyond it
//! are clamped by the applier in any case).
//!
//! The link's record (the source host's catalog; [`crate::link_gate`]) is read once: a paused link ships nothing, a
//! promoted or deleted one is refused, and its topics regex is the default selection.

use std::path::PathBuf;

use segment_format::verify::{Depth, Strictness, VerifyOptions};
use segmirror_catalog::LinkState;
use segmirror_shipper::bucket::seed::{
    self, Progress, SeedConfig, SeedReport, TopicFilter, ALL_TOPICS, DEFAULT_PARALLEL_PARTITIONS,
    DEFAULT_PARALLEL_PARTITIONS_LOCAL,
};
use segmirror_shipper::link_meta::{MetaConfig, MetaPublisher, MetaReader, Published};
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::{S3Options, Store, StoreUrl};

use crate::link_gate::{claim_bucket, shipper_topics, LinkRecord};
use crate::runtime::Runtime;

/// Upload temp files (`<key>#<n>`) untouched this long are leftovers of a killed upload: one under way writes its
/// file continuously (pieces of a few MiB at disk speed), so a minute without a write means no process is behind it,
/// while a seed of another link or partition sharing the folder keeps its in-flight files.
pub const LEFTOVER_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// What a seed needs to know (the command line's `segmirror seed` flags).
#[derive(Debug, Clone)]
pub struct SeedOnceConfig {
    /// The source Kafka log dirs.
    pub log_dirs: Vec<PathBuf>,
    /// Where to ship: a local folder (created if missing) or s3://bucket[/prefix].
    pub store: String,
    /// Topics to ship; `None`: the link record's regex, else every topic.
    pub topics: Option<String>,
    /// The source host's catalog holding the link's record.
    pub catalog: Option<PathBuf>,
    /// The mirror link's name (the first key component under the prefix).
    pub link: String,
    /// Key prefix inside the store.
    pub prefix: String,
    pub s3: S3Options,
    /// How much of a segment is checked before it ships.
    pub depth: Depth,
    /// Partitions shipped at once; `None`: the default for the store's kind.
    pub parallel: Option<usize>,
    /// Who is shipping, recorded in leases and manifests (default: the seed's).
    pub shipper_id: Option<String>,
    pub metadata_log_dir: Option<PathBuf>,
    /// Consumer groups whose committed offsets the link carries (a regular expression).
    pub groups: String,
    /// Where the seed remembers what it found in each active segment; `None`: [`default_memory_file`].
    pub memory: Option<PathBuf>,
}

/// How a seed ended.
pub enum SeedOutcome {
    /// The link is paused: nothing was shipped.
    LinkPaused { link: String },
    /// The segments were shipped, then the link's metadata.
    Shipped(Box<Shipped>),
}

/// What a seed shipped: `report` says how each partition went; `meta` the link's metadata when it was found
/// (published, unchanged, or why not).
pub struct Shipped {
    pub report: SeedReport,
    pub store: Store,
    pub config: SeedConfig,
    pub meta: Option<Result<Published, String>>,
}

/// Folder of the data directory holding the seed's default memories, one file per link.
pub const SEED_MEMORY_DIR: &str = "seed-memory";

/// The seed's memory when none is named: `seed-memory/<link>.json` in the data directory (created if missing).
///
/// Why by default: without a memory every rerun reads every active segment whole to learn that nothing changed
/// (0.3–0.6 s for 1 GiB in 8 active segments, 2.8 s for 7.5 GiB, from a warm page cache); with one, a rerun with
/// nothing new checks each active segment's identity and a bounded window of its bytes
/// (`segmirror_shipper::bucket::seed::SeedMemory`).
/// One file per link, so that seeds of different links never overwrite each other's memory; its facts are keyed by
/// absolute `.log` path, so one file serves any set of log dirs. `None` (every run scans, as without a memory) when
/// there is no data directory or its folder cannot be created, with a warning in the latter case: the memory is
/// a cache and never stops a seed.
pub fn default_memory_file(link: &str) -> Option<PathBuf> {
    let dir = segmirror_catalog::default_data_dir()?.join(SEED_MEMORY_DIR);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "no seed memory: the active segments are read whole");
        return None;
    }
    Some(dir.join(format!("{link}.json")))
}

/// Ships once (see the module doc); `progress` hears of the plan and of each segment.
pub fn seed_once(config: &SeedOnceConfig, runtime: &Runtime, progress: &dyn Progress) -> anyhow::Result<SeedOutcome> {
    let record = LinkRecord::for_shipper(config.catalog.clone(), &config.link)?;
    let topics = shipper_topics("seed", config.topics.as_deref(), record.as_ref(), ALL_TOPICS)?;
    if let Some((_, link)) = &record {
        if link.state == LinkState::Paused {
            return Ok(SeedOutcome::LinkPaused {
                link: link.name.clone(),
            });
        }
    }
    // A local folder that does not exist yet is created: the seed writes the first objects.
    let store = Store::open(&StoreUrl::parse(&config.store)?, &config.s3)?;
    let mut seed_config = SeedConfig::new(config.log_dirs.clone(), &config.link)?;
    seed_config.prefix = KeyPrefix::new(&config.prefix)?;
    seed_config.topics = TopicFilter::new(&topics)?;
    seed_config.verify = VerifyOptions {
        depth: config.depth,
        strictness: Strictness::Lenient,
    };
    seed_config.parallel_partitions = config.parallel.unwrap_or(if store.is_local_folder() {
        DEFAULT_PARALLEL_PARTITIONS_LOCAL
    } else {
        DEFAULT_PARALLEL_PARTITIONS
    });
    if let Some(id) = &config.shipper_id {
        seed_config.shipper_id = id.clone();
    }
    seed_config.validate()?;
    seed_config.memory_file = config.memory.clone().or_else(|| default_memory_file(&config.link));
    if let Some((_, link)) = &record {
        runtime.block_on(claim_bucket("seed", &store, &seed_config.prefix, link))??;
    }
    // A killed seed leaves the upload temp files of a local folder behind; the next one removes those of its prefix.
    let removed = runtime.block_on(store.remove_leftovers(seed_config.prefix.as_str(), LEFTOVER_MIN_AGE))??;
    if !removed.is_empty() {
        eprintln!(
            "note: removed {} upload leftover(s) of an interrupted seed: {}",
            removed.len(),
            removed.join(", ")
        );
    }
    let meta = MetaConfig::find(
        &config.log_dirs,
        config.metadata_log_dir.as_deref(),
        &config.groups,
        seed_config.topics.clone(),
        &config.link,
    )?;
    let report = runtime.block_on(seed::seed(&store, &seed_config, progress))??;
    let meta = match meta {
        Some(meta) => {
            let mut publisher = MetaPublisher::new(
                MetaReader::new(meta)?,
                seed_config.prefix.clone(),
                &seed_config.shipper_id,
            );
            Some(
                runtime
                    .block_on(publisher.publish_if_changed(&store))?
                    .map_err(|e| e.to_string()),
            )
        }
        None => None,
    };
    Ok(SeedOutcome::Shipped(Box::new(Shipped {
        report,
        store,
        config: seed_config,
        meta,
    })))
}
