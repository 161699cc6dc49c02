//! `index_check`: see [`segment_format_fuzz::index_check`] for what runs and which properties are checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| segment_format_fuzz::run("index_check", data));
