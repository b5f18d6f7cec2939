//! Inputs that once crashed a decoder under `fuzz/run`, kept so they never do again; and
//! every truncation of a valid file, the commonest corruption there is.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use headroom_datasets::audio::{decode_flac, decode_wav};
use headroom_datasets::npy::decode_npy;

/// Counts live bytes and their high-water mark, so a test can see what a decode asked for.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// The two tests measure one at a time.
static MEASURING: Mutex<()> = Mutex::new(());

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
            PEAK.fetch_max(live, Ordering::SeqCst);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `decode` on `input` and checks it failed without asking for more memory than a
/// file of that size could ever need (the decoded floats are at most 8x its bytes).
fn assert_rejected_within_bounds<T, E>(
    name: &str,
    input: &[u8],
    decode: impl Fn(&[u8]) -> Result<T, E>,
) {
    let before = LIVE.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let result = decode(input);
    let asked = PEAK.load(Ordering::SeqCst) - before;
    assert!(result.is_err(), "{name}: a crashing input decoded");
    let bound = 16 * input.len() + (1 << 20);
    assert!(
        asked <= bound,
        "{name}: {asked} bytes allocated for {} input bytes",
        input.len()
    );
}

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
    let _one_at_a_time = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    for (name, bytes) in cases("wav") {
        assert_rejected_within_bounds(&name, &bytes, decode_wav);
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
    let _one_at_a_time = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let cases = cases("npy");
    assert!(!cases.is_empty(), "the fuzzers' npy finding is committed");
    for (name, bytes) in cases {
        assert_rejected_within_bounds(&name, &bytes, |b| decode_npy(b, 64));
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

/// Every truncation of a FLAC file is an error (FLAC's header gives its sample count), within
/// the same memory bound as the other decoders.
#[test]
fn flac_inputs_that_crashed_once_and_truncations_are_errors_not_panics() {
    let _one_at_a_time = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    for (name, bytes) in cases("flac") {
        assert_rejected_within_bounds(&name, &bytes, decode_flac);
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tone_stereo.flac");
    let whole = std::fs::read(fixture).unwrap();
    assert!(decode_flac(&whole).is_ok());
    for cut in prefixes(&whole) {
        assert_rejected_within_bounds(&format!("{} bytes", cut.len()), cut, decode_flac);
    }
}
