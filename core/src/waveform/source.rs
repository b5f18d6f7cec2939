//! Where a waveform run's clips come from: the built-in spoken digits, made by the build, or
//! a user's folder of WAV and FLAC files ([`WaveformFolder`]), read and checked; either way
//! each split's clips are quantised to 8-bit levels and laid end to end.

use std::path::{Path, PathBuf};

use headroom_datasets::audio::{read_frames, resample};
use headroom_datasets::error::{FileError, FileProblem};
use headroom_datasets::speech::synthetic::{SpeechKey, SpeechSplit};
use headroom_datasets::waveform::{WaveformFiles, folder};
use serde::{Deserialize, Serialize};

use super::SashimiConfig;
use crate::data::side_by_side;

/// A user's folder of recordings (`headroom_datasets::waveform::folder` says how it is
/// split) and the rate the run takes them at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaveformFolder {
    pub root: PathBuf,
    /// Hz; a file at another rate is an error unless `resample`.
    pub sample_rate: u32,
    pub resample: bool,
    /// Two channels interleaved (`L R L R ...`, as seed 004's loader takes stereo), a mono
    /// file's one twice; otherwise every file mixed down to mono.
    #[serde(default)]
    pub stereo: bool,
}

/// One split's clips.
#[derive(Debug, Clone)]
pub(super) enum Clips {
    Digits(Vec<SpeechKey>),
    Files(Vec<PathBuf>),
}

impl Clips {
    /// Each split's clips, train, validation and test.
    pub(super) fn of(config: &SashimiConfig) -> Result<[Clips; 3], folder::FolderError> {
        if let Some(folder) = &config.folder {
            let WaveformFiles {
                train,
                validation,
                test,
            } = folder::scan(&folder.root)?;
            return Ok([train, validation, test].map(Clips::Files));
        }
        let keys = config.digits.keys();
        Ok([
            SpeechSplit::Train,
            SpeechSplit::Validation,
            SpeechSplit::Test,
        ]
        .map(|split| Clips::Digits(keys.iter().filter(|k| k.split == split).cloned().collect())))
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Clips::Digits(keys) => keys.len(),
            Clips::Files(paths) => paths.len(),
        }
    }

    /// The levels of every clip end to end, the first clip's length, and the files that
    /// could not be read (left out) and that were resampled.
    pub(super) fn levels(&self, config: &SashimiConfig) -> Made {
        match self {
            Clips::Digits(keys) => {
                let clip = |key: &SpeechKey| config.quantizer.levels(&config.digits.clip(key));
                let made = halves(keys, |keys| Made {
                    levels: keys.iter().flat_map(clip).collect(),
                    ..Made::default()
                });
                Made {
                    first_clip: config.digits.clip_samples.min(made.levels.len()),
                    ..made
                }
            }
            Clips::Files(paths) => {
                let Some(folder) = &config.folder else {
                    return Made::default();
                };
                halves(paths, |paths| {
                    let mut made = Made::default();
                    for path in paths {
                        match read(path, folder) {
                            Ok((samples, resampled)) => {
                                if made.levels.is_empty() {
                                    made.first_clip = samples.len();
                                }
                                made.levels.extend(config.quantizer.levels(&samples));
                                made.resampled += usize::from(resampled);
                            }
                            Err(problem) => made.problems.push(problem),
                        }
                    }
                    made
                })
            }
        }
    }
}

/// A split's levels as [`Clips::levels`] makes them.
#[derive(Debug, Default)]
pub(super) struct Made {
    pub levels: Vec<u8>,
    pub first_clip: usize,
    pub problems: Vec<FileError>,
    pub resampled: usize,
}

/// `make` of each half of `items` on its own thread (decoding and making audio is most of
/// the work), joined in order.
fn halves<T: Sync>(items: &[T], make: impl Fn(&[T]) -> Made + Sync) -> Made {
    let (first, second) = items.split_at(items.len() / 2);
    let (mut made, later) = side_by_side(|| make(first), || make(second));
    if made.levels.is_empty() {
        made.first_clip = later.first_clip;
    }
    made.levels.extend(later.levels);
    made.problems.extend(later.problems);
    made.resampled += later.resampled;
    made
}

/// One file's samples at the folder's rate (its channels mixed down, or two interleaved for
/// a stereo run), and whether they were resampled.
fn read(path: &Path, folder: &WaveformFolder) -> Result<(Vec<f32>, bool), FileError> {
    let frames = read_frames(path)?;
    if frames.interleaved.is_empty() {
        return Err(FileError::new(path, FileProblem::Empty));
    }
    let rate = folder.sample_rate;
    let resampled = frames.sample_rate != rate;
    if resampled && !folder.resample {
        return Err(FileError::new(
            path,
            FileProblem::SampleRate {
                found: frames.sample_rate,
                expected: rate,
            },
        ));
    }
    let here = |problem| FileError::new(path, problem);
    let samples = match (folder.stereo, resampled) {
        (true, true) => frames.resampled(rate).map_err(here)?.stereo(),
        (true, false) => frames.stereo(),
        (false, true) => resample(&frames.mixed(), rate).map_err(here)?.samples,
        (false, false) => frames.mixed().samples,
    };
    Ok((samples, resampled))
}
