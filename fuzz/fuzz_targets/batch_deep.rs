//! `batch_deep`: see [`segment_format_fuzz::batch_deep`] for what runs and which properties are checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| segment_format_fuzz::run("batch_deep", data));
