//! Helpers shared by the direct transport's integration tests (each test crate uses a part of them).
#![allow(dead_code)]

pub mod certs;
pub mod session;
