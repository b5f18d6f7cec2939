//! Where a recogniser's utterances come from: the built-in generated corpus, or recordings
//! listed by a manifest (TSV or JSON lines) or found in the LibriSpeech folder layout, one
//! listing per split. Recordings are read when the run checks its data (train and
//! validation) or scores the test split, and resampled to the corpus's rate where theirs
//! differs.

use std::path::{Path, PathBuf};

use headroom_datasets::audio::{self, Audio};
use headroom_datasets::speech::synthetic::{SpeechConfig, SpeechKey};
use headroom_datasets::speech::{SpeechIndex, Utterance, librispeech, manifest};
use headroom_datasets::{FileError, FileProblem};
use serde::{Deserialize, Serialize};

use crate::data::{OnBadFile, report_bad_files};
use crate::train::TrainError;

/// Recordings by split: each a manifest file (`.tsv`, `.jsonl`: audio path, transcript,
/// optional duration) or a folder in the LibriSpeech layout (`*.trans.txt` beside FLAC or
/// WAV files).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeechFiles {
    pub train: PathBuf,
    /// `None`: every `validation_every_nth_clip`-th train utterance is held out instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<PathBuf>,
    /// `None`: the run is scored on its validation split only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<PathBuf>,
}

/// One utterance as a run lists it.
#[derive(Debug, Clone)]
pub enum Source {
    Generated(SpeechKey),
    File(Utterance),
}

impl Source {
    pub fn transcript(&self) -> &str {
        match self {
            Source::Generated(key) => &key.transcript,
            Source::File(u) => &u.transcript,
        }
    }

    /// Where it is, for a message: the file, or the generated utterance's split and number.
    pub fn name(&self) -> String {
        match self {
            Source::Generated(key) => format!("generated {:?} utterance {}", key.split, key.index),
            Source::File(u) => u.audio.display().to_string(),
        }
    }
}

/// Indexes the listing at `path`: a folder in the LibriSpeech layout, else a manifest. A
/// listing that cannot be read at all is an error naming it (no file of it can be left out).
fn index(path: &Path) -> Result<SpeechIndex, TrainError> {
    let failed = |e: &dyn std::fmt::Display| TrainError::Task(e.to_string());
    if path.is_dir() {
        librispeech::scan(path).map_err(|e| failed(&e))
    } else {
        manifest::read(path).map_err(|e| failed(&e))
    }
}

/// The utterances of `files` by split (train, validation, test), each listing's problems
/// failed on or left out and listed in `skipped` as `on_bad_file` says; with no validation
/// listing, every `every`-th train utterance is held out.
pub fn list(
    files: &SpeechFiles,
    every: usize,
    on_bad_file: OnBadFile,
    skipped: &mut Vec<String>,
) -> Result<[Vec<Source>; 3], TrainError> {
    let mut read = |path: &Path| -> Result<Vec<Source>, TrainError> {
        let found = index(path)?;
        report_bad_files(found.problems, on_bad_file, skipped)?;
        Ok(found.utterances.into_iter().map(Source::File).collect())
    };
    let listed = read(&files.train)?;
    let (train, validation) = match &files.validation {
        Some(path) => (listed, read(path)?),
        None if every > 0 => {
            let (mut train, mut validation) = (Vec::new(), Vec::new());
            for (i, source) in listed.into_iter().enumerate() {
                if (i + 1) % every == 0 {
                    validation.push(source);
                } else {
                    train.push(source);
                }
            }
            (train, validation)
        }
        None => (listed, Vec::new()),
    };
    let test = match &files.test {
        Some(path) => read(path)?,
        None => Vec::new(),
    };
    Ok([train, validation, test])
}

/// An utterance's samples at `rate` Hz: generated, or read and resampled when the file's
/// rate differs (`resampled` is set then).
pub fn samples(
    source: &Source,
    corpus: &SpeechConfig,
    rate: u32,
    resampled: &mut bool,
) -> Result<Audio, FileError> {
    match source {
        Source::Generated(key) => Ok(corpus.audio(key)),
        Source::File(u) => {
            let read = audio::read_audio(&u.audio)?;
            if read.samples.is_empty() {
                return Err(FileError::new(&u.audio, FileProblem::Empty));
            }
            if read.sample_rate == rate {
                return Ok(read);
            }
            *resampled = true;
            audio::resample(&read, rate).map_err(|problem| FileError::new(&u.audio, problem))
        }
    }
}
