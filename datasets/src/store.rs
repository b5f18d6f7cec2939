//! A dataset's clips, read on demand: only the index lives in memory, unless the whole
//! dataset's spectrograms fit the host-memory share the loader was given, in which case
//! each is kept once read (the built-in synthetic dataset, small real ones).

use std::sync::{Arc, OnceLock};

use crate::clip::ClipInfo;
use crate::error::FileError;
use crate::reader::ClipReader;
use crate::spectrogram::Spectrogram;

pub struct ClipStore {
    clips: Vec<ClipInfo>,
    reader: ClipReader,
    resident: Option<Vec<OnceLock<Arc<Spectrogram>>>>,
}

impl ClipStore {
    pub fn new(clips: Vec<ClipInfo>, reader: ClipReader) -> Self {
        Self {
            clips,
            reader,
            resident: None,
        }
    }

    /// Keep every spectrogram in host memory once it has been read.
    pub fn keep_resident(&mut self) {
        self.resident = Some((0..self.clips.len()).map(|_| OnceLock::new()).collect());
    }

    pub fn is_resident(&self) -> bool {
        self.resident.is_some()
    }

    pub fn clips(&self) -> &[ClipInfo] {
        &self.clips
    }

    pub fn reader(&self) -> &ClipReader {
        &self.reader
    }

    /// The spectrogram of clip `index`.
    pub fn read(&self, index: usize) -> Result<Arc<Spectrogram>, FileError> {
        let clip = &self.clips[index];
        let Some(resident) = &self.resident else {
            return self.reader.read(clip).map(Arc::new);
        };
        if let Some(kept) = resident[index].get() {
            return Ok(kept.clone());
        }
        let spectrogram = Arc::new(self.reader.read(clip)?);
        // Two workers may read the same clip at once; either copy is the same.
        Ok(resident[index].get_or_init(|| spectrogram).clone())
    }
}

/// Host bytes of a spectrogram's values.
pub fn spectrogram_bytes(s: &Spectrogram) -> u64 {
    (s.data.len() * std::mem::size_of::<f32>()) as u64
}
