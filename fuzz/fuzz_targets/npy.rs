//! Any bytes given to the `.npy` decoder: an error or a spectrogram, never a panic or a
//! huge allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = headroom_datasets::npy::decode_npy(data, 4) {
        assert_eq!(s.data.len(), s.n_mels * s.frames);
        assert!(s.data.len() * 2 <= data.len());
        assert!(s.data.iter().all(|v| v.is_finite()));
    }
});
