//! `verify_dir`: see [`segment_format_fuzz::verify_dir`] for what runs and which properties are checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| segment_format_fuzz::run("verify_dir", data));
