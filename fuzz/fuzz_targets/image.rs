#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| zrecord_fuzz::image(data));
