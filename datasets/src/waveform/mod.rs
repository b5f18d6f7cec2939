//! Raw waveforms for autoregressive audio models (SaShiMi, seed 004): samples quantised to
//! 256 levels ([`quantize`]), and a built-in set of spoken digits in the manner of SC09
//! ([`digits`]): one word a clip, several voices, a fixed length at 16 kHz, made by the
//! project's own speech generator; or a user's folder of WAV and FLAC files ([`folder`]).

pub mod digits;
pub mod folder;
pub mod quantize;

pub use digits::{DIGITS, DigitsConfig};
pub use folder::{FolderError, WaveformFiles};
pub use quantize::{LEVELS, Quantizer};
