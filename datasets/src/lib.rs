//! Spectrogram data for Headroom: the log-mel frontend, the built-in synthetic
//! machine-sound dataset and patching. Host-side only: nothing here knows about
//! tensors or devices, so the engine decides when a batch goes to the device.

pub mod clip;
pub mod logmel;
pub mod patch;
pub mod synthetic;

pub use clip::{Clip, Label, Spectrogram, Split};
pub use logmel::{LogMel, LogMelConfig};
pub use patch::{PATCH_SIZE, PatchError, PatchPlacement, PatchSpec};
pub use synthetic::{AnomalyKind, SyntheticConfig, SyntheticDataset};
