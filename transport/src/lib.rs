//! The contract between the shipper and the applier, whatever carries the bytes.
//!
//! Both sides must agree on what a bucket (or any other transport) may hold and in which order segment versions
//! may follow each other; writing that agreement down once, in a crate both depend on, is what keeps the shipper's
//! resume, the applier's plan, the catalog's last check and the audit from drifting apart.
//!
//! - [`succession`]: the one rule for which segment version may follow which, as a pure function returning a typed
//!   verdict that each caller maps to its own action.
//! - [`direct`]: the direct protocol (frames, handshake, mutual TLS, sessions and links); see `docs/direct-protocol.md`.

pub mod direct;
pub mod succession;
