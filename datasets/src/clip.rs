//! A clip as a dataset's index holds it: where its spectrogram comes from and the metadata
//! anomaly detection needs, without its data.

use crate::clip_key::ClipKey;
use crate::label::{Label, Split};

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
    Synthetic(ClipKey),
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
