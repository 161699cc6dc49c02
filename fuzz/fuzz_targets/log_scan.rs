//! `log_scan`: see [`segment_format_fuzz::log_scan`] for what runs and which properties are checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| segment_format_fuzz::run("log_scan", data));
