//! Shipping through a bucket: the shipper's half of the object-store delivery mode, for sites where the two sides
//! cannot reach each other and both reach one bucket (the applier's half is `applier::bucket`).
//!
//! - [`seed`]: one round — ship what the source log dirs hold (sealed segments verified and whole, the active one
//!   up to its last complete batch as chunks), resumably, each partition under its lease, data objects before the
//!   manifest that names them (`segmirror seed`).
//! - [`follow`]: continuous shipping (`segmirror ship --store`): rounds of [`seed`] started by the log-dir
//!   watcher, with the leases and the active segments' state kept between rounds.
//!
//! Why one module: both write the same bucket contract (`segmirror_transport`'s keys, manifests, succession rule
//! and leases) by the same code, so a round of [`follow`] commits exactly the versions a one-shot [`seed`] would.

pub mod follow;
pub mod seed;
