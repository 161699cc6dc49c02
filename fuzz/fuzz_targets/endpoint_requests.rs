//! `endpoint_requests`: see [`segment_format_fuzz::endpoint::endpoint_requests`] for what runs and which properties are checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| segment_format_fuzz::run("endpoint_requests", data));
