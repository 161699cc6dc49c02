//! The replica over a mirror root (placeholder).
pub mod segments;
