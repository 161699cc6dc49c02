//! The contract between shipper and applier and the transports that carry it.

pub mod direct;
