//! A user's folder of recordings as a waveform model's data: every WAV and FLAC file under
//! it, split three ways. With `train/` (and optionally `validation/`, `valid/` or `val/`, and
//! `test/`) subfolders, each is a split, and without a validation folder the last twentieth
//! of the train files (at least one) is held out for it. Otherwise the files in name order
//! are split as the state-spaces/s4 audio loaders split a folder: the last twentieth is the
//! test split, the twentieth before it the validation split (at least one file each), the
//! rest train.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The audio files of each split, in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaveformFiles {
    pub train: Vec<PathBuf>,
    pub validation: Vec<PathBuf>,
    pub test: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("cannot list {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} holds no .wav or .flac files; give a folder of recordings",
        root.display()
    )]
    NoAudio { root: PathBuf },
    #[error(
        "{} holds {count} audio file(s): a run needs at least three to split into train, \
         validation and test (or train/, validation/ and test/ subfolders)",
        root.display()
    )]
    TooFew { root: PathBuf, count: usize },
    #[error(
        "{} holds {count} .wav or .flac file(s): with no validation/ folder beside it, it \
         needs at least two, one of them held out for validation",
        root.display()
    )]
    TooFewTrain { root: PathBuf, count: usize },
}

/// The subfolders a validation split may be in, in the order they are looked for.
const VALIDATION_NAMES: [&str; 3] = ["validation", "valid", "val"];

/// The files under `root`, split as the module says.
pub fn scan(root: &Path) -> Result<WaveformFiles, FolderError> {
    let train_dir = root.join("train");
    if train_dir.is_dir() {
        let mut train = audio_files(&train_dir)?;
        let validation = match VALIDATION_NAMES
            .iter()
            .map(|name| root.join(name))
            .find(|dir| dir.is_dir())
        {
            Some(dir) => audio_files(&dir)?,
            None if train.len() < 2 => {
                return Err(FolderError::TooFewTrain {
                    root: train_dir,
                    count: train.len(),
                });
            }
            None => train.split_off(train.len() - (train.len() / 20).max(1)),
        };
        if train.is_empty() {
            return Err(FolderError::TooFewTrain {
                root: train_dir,
                count: 0,
            });
        }
        let test_dir = root.join("test");
        let test = if test_dir.is_dir() {
            audio_files(&test_dir)?
        } else {
            Vec::new()
        };
        return Ok(WaveformFiles {
            train,
            validation,
            test,
        });
    }
    let files = audio_files(root)?;
    match files.len() {
        0 => Err(FolderError::NoAudio {
            root: root.to_path_buf(),
        }),
        count @ 1..3 => Err(FolderError::TooFew {
            root: root.to_path_buf(),
            count,
        }),
        _ => Ok(split_in_order(files)),
    }
}

/// The last twentieth (at least one file) for test, the one before it for validation.
pub fn split_in_order(mut files: Vec<PathBuf>) -> WaveformFiles {
    let held = (files.len() / 20).max(1);
    let test = files.split_off(files.len() - held);
    let validation = files.split_off(files.len() - held);
    WaveformFiles {
        train: files,
        validation,
        test,
    }
}

/// Every `.wav` and `.flac` file under `dir`, at any depth, sorted by path.
fn audio_files(dir: &Path) -> Result<Vec<PathBuf>, FolderError> {
    let mut found = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let io = |source| FolderError::Io {
            path: folder.clone(),
            source,
        };
        for entry in std::fs::read_dir(&folder).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.is_dir() {
                folders.push(path);
            } else if is_audio(&path) {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

fn is_audio(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("wav") || e.eq_ignore_ascii_case("flac"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"").unwrap();
    }

    #[test]
    fn a_flat_folder_is_split_by_name_with_one_file_held_out_each_at_least() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["c.wav", "a.flac", "b.WAV", "notes.txt", "deep/d.wav"] {
            touch(&dir.path().join(name));
        }
        let files = scan(dir.path()).unwrap();
        let names = |paths: &[PathBuf]| -> Vec<String> {
            paths
                .iter()
                .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
                .collect()
        };
        assert_eq!(names(&files.train), ["a.flac", "b.WAV"]);
        assert_eq!(names(&files.validation), ["c.wav"]);
        assert_eq!(names(&files.test), ["deep/d.wav"]);
    }

    #[test]
    fn forty_files_hold_out_two_each() {
        let files: Vec<PathBuf> = (0..40).map(|i| format!("{i:02}.wav").into()).collect();
        let split = split_in_order(files);
        assert_eq!(split.train.len(), 36);
        assert_eq!(split.validation, [PathBuf::from("36.wav"), "37.wav".into()]);
        assert_eq!(split.test, [PathBuf::from("38.wav"), "39.wav".into()]);
    }

    #[test]
    fn split_folders_are_taken_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["train/a.wav", "train/b.wav", "valid/c.flac", "test/d.wav"] {
            touch(&dir.path().join(name));
        }
        let files = scan(dir.path()).unwrap();
        assert_eq!(files.train.len(), 2);
        assert_eq!(files.validation, [dir.path().join("valid/c.flac")]);
        assert_eq!(files.test, [dir.path().join("test/d.wav")]);
    }

    #[test]
    fn too_few_files_and_no_files_are_said() {
        let dir = tempfile::tempdir().unwrap();
        let empty = scan(dir.path()).unwrap_err().to_string();
        assert!(empty.contains("no .wav or .flac"), "{empty}");
        touch(&dir.path().join("one.wav"));
        let few = scan(dir.path()).unwrap_err().to_string();
        assert!(few.contains("1 audio file(s)"), "{few}");
        touch(&dir.path().join("train/one.wav"));
        let train = scan(dir.path()).unwrap_err().to_string();
        assert!(train.contains("needs at least two"), "{train}");
    }

    #[test]
    fn a_train_folder_alone_holds_out_its_last_file_for_validation() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["train/a.wav", "train/b.wav", "train/c.wav"] {
            touch(&dir.path().join(name));
        }
        let files = scan(dir.path()).unwrap();
        assert_eq!(files.train.len(), 2);
        assert_eq!(files.validation, [dir.path().join("train/c.wav")]);
        assert!(files.test.is_empty());
    }
}
