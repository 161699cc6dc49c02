//! The appliers, one per delivery mode: [`bucket`] installs what a shipper put in an object store (once, or
//! following the store), [`direct`] receives what a direct shipper streams over a link and appends it.
//!
//! Why both here: each opens the mirror root's catalog once and hands it to the applier library, serves the same
//! `/metrics` and admin API, and ends the same way when its link is promoted or deleted
//! ([`crate::link_gate::ClosedLink`]); the command line only turns flags into their settings and prints.

pub mod bucket;
pub mod direct;
