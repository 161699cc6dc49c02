//! The bucket delivery mode: installing what a shipper committed to an object store (`segmirror ship --store`),
//! once (`segmirror apply --store`) or continuously (`--follow`).
//!
//! A run lists one link's manifests, plans each partition with the succession rule, and installs every planned
//! version through the installer (`crate::install`: stage, validate, make durable, rename into place; the catalog
//! is told last). The installer stays outside this module: it installs a segment version into the mirror from any
//! `SegmentSource`, whatever chose it. The parts:
//! - [`apply`]: one run over one link ([`Applier`], [`ApplyConfig`]): gate, lineage, read, reconcile, plan,
//!   install, sweep, in that order per partition;
//! - `read`: the bucket as the applier reads it (the listing by link, a manifest checked against its key, the
//!   lineage rule);
//! - [`plan`]: the ordering rule, one pure function from what is installed and what is listed to the steps;
//! - `reconcile`: the partition directory against the catalog after whatever happened to the last run;
//! - [`follow`]: a loop of runs holding the mirror lock, until told to stop;
//! - `quiet`: what a follower's runs pass over (partitions complete and listed the same since).

mod apply;
pub mod follow;
pub mod plan;
mod quiet;
mod read;
mod reconcile;

pub use apply::{apply, Applier, ApplyConfig, APPLIER_TOPICS_REGEX, DEFAULT_PARALLEL_PARTITIONS};
pub use read::MANIFEST_READ_CONCURRENCY;
