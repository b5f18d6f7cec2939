//! Spectrogram data for Headroom: WAV and `.npy` files in the DCASE 2020 Task 2 layout,
//! speech corpora (manifests, the LibriSpeech layout, FLAC, a character vocabulary), the
//! log-mel frontend, the built-in synthetic machine-sound dataset, patching, and the
//! read-ahead that streams clips from disk. Host-side only: nothing here knows about
//! tensors or devices, so the engine decides when a batch goes to the device.

pub mod audio;
pub mod clip;
pub mod clip_key;
pub mod dcase;
pub mod error;
pub mod label;
pub mod logmel;
pub mod npy;
pub mod patch;
pub mod prefetch;
pub mod reader;
pub mod spectrogram;
pub mod speech;
pub mod store;
pub mod synthetic;
pub mod waveform;

pub use clip::{ClipInfo, LoadedFile, Origin};
pub use error::{FileError, FileProblem};
pub use label::{Label, Split};
pub use logmel::{LogMel, LogMelConfig};
pub use patch::{PATCH_SIZE, PatchError, PatchPlacement, PatchShape, PatchSpec};
pub use prefetch::Prefetch;
pub use reader::{ClipReader, FeatureCache, FeatureSettings};
pub use spectrogram::Spectrogram;
pub use store::ClipStore;
pub use synthetic::{AnomalyKind, SyntheticConfig, SyntheticDataset};
