//! Reading a mirror partition directory (placeholder).
