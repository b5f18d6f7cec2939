//! What can be wrong with one file of a dataset. Every error names the file, so a user
//! with thousands of clips knows which one to fix or remove.

use std::fmt;
use std::path::{Path, PathBuf};

/// A problem with one file, and the file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct FileError {
    pub path: PathBuf,
    pub problem: FileProblem,
}

impl FileError {
    pub fn new(path: impl AsRef<Path>, problem: FileProblem) -> Self {
        Self {
            path: path.as_ref().to_path_buf(),
            problem,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    #[error("cannot read it ({0})")]
    Io(#[from] std::io::Error),
    #[error("not a WAV file this reader understands ({0})")]
    Wav(String),
    #[error("not a FLAC file this reader understands ({0})")]
    Flac(String),
    /// A line of a listing (a manifest, a LibriSpeech transcript file) that cannot be an
    /// utterance.
    #[error("{0}")]
    Listing(String),
    #[error("not a .npy file this reader understands ({0})")]
    Npy(String),
    #[error(
        "truncated: its header promises {promised} bytes of samples but only {held} follow; \
         the file was cut short (copy it again or remove it)"
    )]
    Truncated { promised: u64, held: u64 },
    #[error("empty: it holds no samples")]
    Empty,
    #[error(
        "its header asks for {asked} bytes but the file holds only {held}; rejected before \
         reading it"
    )]
    Oversized { asked: u64, held: u64 },
    #[error("shape {shape:?}: expected [n_mels, frames] with n_mels = {n_mels} and frames >= 1")]
    Shape { shape: Vec<u64>, n_mels: usize },
    #[error("dtype {0}: expected little-endian float32 or float16 ('<f4' or '<f2')")]
    Dtype(String),
    #[error(
        "sample rate {found} Hz, but the dataset's is {expected} Hz; convert it \
         (resampling), or set the dataset's sample rate to {found} if every file has that rate"
    )]
    SampleRate { found: u32, expected: u32 },
    #[error("{channels} channels: only mono and stereo are mixed down")]
    Channels { channels: u16 },
    #[error("holds {count} {kind} value(s), the first at index {first}; fix or remove the file")]
    NonFinite {
        kind: NonFiniteKind,
        count: usize,
        first: usize,
    },
    #[error(
        "the file name does not follow the DCASE pattern: expected \
         normal_id_XX_NNNNNNNN, anomaly_id_XX_NNNNNNNN or id_XX_NNNNNNNN (got {0:?})"
    )]
    Name(String),
    #[error(
        "an anomalous clip in a train/ folder: the model learns normal sounds only; move it \
         to test/"
    )]
    AnomalyInTrain,
    #[error("cannot resample it: {0}")]
    Resample(String),
    #[error(transparent)]
    Patch(#[from] crate::patch::PatchError),
    #[error("a reading thread stopped without reading it (it panicked; see the log above)")]
    ReaderStopped,
    #[error("a synthetic clip, but this reader was given no synthetic dataset to make it from")]
    NoSyntheticConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonFiniteKind {
    NaN,
    Infinite,
}

impl fmt::Display for NonFiniteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NonFiniteKind::NaN => "NaN",
            NonFiniteKind::Infinite => "infinite",
        })
    }
}

/// Rejects values that would poison training: NaN first, since it is the likelier fault.
pub fn check_finite(values: &[f32]) -> Result<(), FileProblem> {
    for kind in [NonFiniteKind::NaN, NonFiniteKind::Infinite] {
        let bad = |v: &f32| match kind {
            NonFiniteKind::NaN => v.is_nan(),
            NonFiniteKind::Infinite => v.is_infinite(),
        };
        if let Some(first) = values.iter().position(bad) {
            return Err(FileProblem::NonFinite {
                kind,
                count: values.iter().filter(|v| bad(v)).count(),
                first,
            });
        }
    }
    Ok(())
}

/// Writes through a temporary file in the same folder and renames it into place, so a
/// reader (or a crash) never sees half a file and nothing already there is lost.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        write(&mut out)?;
        out.flush()?;
        out.get_ref().sync_all()?;
        drop(out);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_is_reported_before_infinity_with_its_count_and_first_index() {
        let values = [1.0, f32::INFINITY, f32::NAN, 2.0, f32::NAN];
        match check_finite(&values) {
            Err(FileProblem::NonFinite { kind, count, first }) => {
                assert_eq!((kind, count, first), (NonFiniteKind::NaN, 2, 2));
            }
            other => panic!("expected NonFinite, got {other:?}"),
        }
        assert!(check_finite(&[0.0, -1.0]).is_ok());
    }

    #[test]
    fn an_atomic_write_that_fails_leaves_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        std::fs::write(&path, b"old").unwrap();
        let failed = write_atomically(&path, |_| Err(std::io::Error::other("disk full")));
        assert!(failed.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temp file left"
        );
        write_atomically(&path, |w| std::io::Write::write_all(w, b"new")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
    }
}
