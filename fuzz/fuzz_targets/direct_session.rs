//! `direct_session`: see [`segment_format_fuzz::session`] for what runs and which properties are checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| segment_format_fuzz::run("direct_session", data));
