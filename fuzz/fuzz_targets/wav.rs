//! Any bytes given to the WAV decoder: an error or audio, never a panic or a huge allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(audio) = headroom_datasets::audio::decode_wav(data) {
        // Decoded samples come from the file's bytes: never more than it holds.
        assert!(audio.samples.len() <= data.len());
        assert!(audio.samples.iter().all(|s| s.is_finite()));
    }
});
