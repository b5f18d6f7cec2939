//! Inputs that once crashed a decoder under `fuzz/run`, kept so they never do again; and
//! every truncation of a valid file, the commonest corruption there is.

use std::path::Path;

use headroom_datasets::audio::decode_wav;
use headroom_datasets::npy::decode_npy;

fn cases(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_regressions")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut cases: Vec<(String, Vec<u8>)> = entries
        .map(|e| e.unwrap().path())
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    cases.sort();
    cases
}

/// Every prefix of a file: the truncations an interrupted copy leaves.
fn prefixes(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    (0..bytes.len()).map(move |n| &bytes[..n])
}

#[test]
fn wav_inputs_that_crashed_once_and_truncations_are_errors_not_panics() {
    for (name, bytes) in cases("wav") {
        let _ = std::hint::black_box(decode_wav(&bytes));
        eprintln!("{name}: no panic");
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/logmel_signal.wav");
    let whole = std::fs::read(fixture).unwrap();
    let full = decode_wav(&whole).unwrap().samples.len();
    // The header and the first samples, and the last bytes of the data.
    for cut in prefixes(&whole[..4096]).chain(prefixes(&whole).skip(whole.len() - 64)) {
        if let Ok(audio) = decode_wav(cut) {
            panic!(
                "{} of {} bytes decoded to {} of {full} samples",
                cut.len(),
                whole.len(),
                audio.samples.len()
            );
        }
    }
}

#[test]
fn npy_inputs_that_crashed_once_and_truncations_are_errors_not_panics() {
    for (name, bytes) in cases("npy") {
        let _ = std::hint::black_box(decode_npy(&bytes, 64));
        eprintln!("{name}: no panic");
    }
    let spectrogram = headroom_datasets::Spectrogram {
        n_mels: 4,
        frames: 3,
        data: (0..12).map(|v| v as f32).collect(),
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.npy");
    headroom_datasets::npy::write_npy(&path, &spectrogram).unwrap();
    let whole = std::fs::read(&path).unwrap();
    assert_eq!(decode_npy(&whole, 4).unwrap(), spectrogram);
    for cut in prefixes(&whole) {
        assert!(
            decode_npy(cut, 4).is_err(),
            "{} of {} bytes decoded",
            cut.len(),
            whole.len()
        );
    }
}
