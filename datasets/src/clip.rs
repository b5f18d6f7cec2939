//! A clip: one log-mel spectrogram with the metadata anomaly detection needs.

use serde::{Deserialize, Serialize};

/// A log-mel spectrogram stored mel-major: `data[mel * frames + frame]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Spectrogram {
    pub n_mels: usize,
    pub frames: usize,
    pub data: Vec<f32>,
}

impl Spectrogram {
    pub fn zeros(n_mels: usize, frames: usize) -> Self {
        Self {
            n_mels,
            frames,
            data: vec![0.0; n_mels * frames],
        }
    }

    pub fn at(&self, mel: usize, frame: usize) -> f32 {
        self.data[mel * self.frames + frame]
    }
}

/// Which part of a dataset a clip belongs to; ordered as a scan lists them, train first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Train,
    Test,
}

/// Ground truth of a clip, when the dataset has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    Normal,
    Anomaly,
}

/// A file handed over as bytes rather than found on disk: what a web page has of the files
/// its user picks or drops (a page cannot open paths).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedFile {
    /// Where it sat in the user's folder (`dev_data/fan/train/normal_id_00_00000000.wav`):
    /// what the layout is read from and what errors name.
    pub path: std::path::PathBuf,
    pub bytes: std::sync::Arc<[u8]>,
}

/// Where a clip's spectrogram comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// A recording, turned into log-mel features when read.
    Wav(std::path::PathBuf),
    /// Precomputed features, `[n_mels, frames]`.
    Npy(std::path::PathBuf),
    /// A recording handed over as bytes.
    WavBytes(LoadedFile),
    /// Precomputed features handed over as bytes.
    NpyBytes(LoadedFile),
    /// A clip of the built-in synthetic dataset, synthesised when read.
    Synthetic(crate::synthetic::ClipKey),
}

impl Origin {
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Origin::Wav(p) | Origin::Npy(p) => Some(p),
            Origin::WavBytes(f) | Origin::NpyBytes(f) => Some(&f.path),
            Origin::Synthetic(_) => None,
        }
    }
}

/// One clip of a dataset, without its data: what the index of a lazily read dataset holds.
#[derive(Debug, Clone, PartialEq)]
pub struct ClipInfo {
    /// The file name, as the challenge's score files list it (`normal_id_00_00000003.wav`).
    pub name: String,
    pub machine_type: String,
    pub machine_id: u32,
    pub split: Split,
    /// `None` for unlabelled evaluation clips (`id_00_00000003.wav`).
    pub label: Option<Label>,
    pub origin: Origin,
}

impl ClipInfo {
    /// How error messages and logs name the clip: its path, or its synthetic name.
    pub fn describe(&self) -> String {
        match self.origin.path() {
            Some(path) => path.display().to_string(),
            None => format!("synthetic clip {}/{}", self.machine_type, self.name),
        }
    }
}
