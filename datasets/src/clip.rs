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

/// Which part of a dataset a clip belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// One clip of a machine-sound dataset.
#[derive(Debug, Clone)]
pub struct Clip {
    /// A stable name, in the DCASE style (`normal_id_00_00000003`).
    pub name: String,
    pub machine_id: u32,
    pub label: Label,
    pub spectrogram: Spectrogram,
}
