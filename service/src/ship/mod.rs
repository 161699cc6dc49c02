//! The shippers, one per delivery mode: [`direct`] streams new batches to a direct applier over one link, [`bucket`]
//! uploads them to an object store continuously, and [`seed`] ships what the log dirs hold to an object store once.
//!
//! Why the same names as the appliers' (`crate::apply::{bucket, direct}`): an operator, or a reader of the code,
//! finds both sides of one delivery mode under one name.

pub mod bucket;
pub mod direct;
pub mod seed;

pub use direct::SourceNodes;
