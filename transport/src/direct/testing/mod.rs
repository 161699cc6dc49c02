//! Test helpers of the direct transport, compiled for this crate's tests and
//! with the `testing` feature (the workspace's end-to-end tests enable it).

pub mod proxy;

pub use proxy::{FaultProxy, Mode};
