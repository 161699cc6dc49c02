//! One module per API (placeholder).
