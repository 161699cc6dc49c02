//! segmirror's Kafka protocol client: one framed connection per broker ([`connection`]), shared with the shipper's
//! high-watermark source, and the admin calls a failover makes on the target cluster ([`admin`]); what to create,
//! check and commit there is decided by [`topics_plan`] and [`offsets_plan`], pure functions of the source's state
//! and the target's answers, so they are tested without a broker; [`topics_sync`] and [`offsets_commit`] run them against the target, for
//! `segmirror topics`, `segmirror offsets commit` and `segmirror failover` alike.

pub mod admin;
pub mod connection;
pub mod error;
pub mod offsets_commit;
pub mod offsets_plan;
pub mod topics_plan;
pub mod topics_sync;

pub use admin::AdminClient;
pub use connection::Connection;
pub use error::{error_name, Error, Result};
