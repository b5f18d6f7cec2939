//! A log-mel spectrogram: what every reader produces and every consumer reads.

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
