//! Any bytes given to the FLAC decoder: an error or audio, never a panic or a huge
//! allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(audio) = headroom_datasets::audio::decode_flac(data) {
        // At most what the header promises, and every sample finite.
        assert!(audio.samples.iter().all(|s| s.is_finite()));
    }
});
