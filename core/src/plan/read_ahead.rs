//! What the train stream holds while it reads ahead: memory of the run that a step's
//! measurement does not see, and that grows with the micro-batch.
//!
//! On the CPU backends a step's memory is the process's, so spectrograms read ahead share the
//! budget with the step (in the default run about 1 MiB; streamed from disk, hundreds of KiB
//! a clip). On a GPU they are host memory outside the device's budget: none is counted there.

use serde::{Deserialize, Serialize};

/// The read-ahead's host memory as a function of the micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ReadAhead {
    /// Micro-batches read ahead of the one training (`--prefetch`).
    pub micro_batches: usize,
    /// Bytes one spectrogram read ahead holds: its patches.
    pub bytes_per_clip: u64,
    /// The most spectrograms read ahead at once (the loader's host-memory bound).
    pub max_clips: usize,
    /// Bytes the loader's workers hold while reading clips from disk (decoded audio and
    /// its log-mel), all workers together; none when the spectrograms are resident.
    pub reading_bytes: u64,
}

impl ReadAhead {
    /// Nothing counted: a GPU's budget, or a run without a stream.
    pub const NONE: Self = Self {
        micro_batches: 0,
        bytes_per_clip: 0,
        max_clips: 0,
        reading_bytes: 0,
    };

    /// Spectrograms read ahead at a micro-batch of `micro_batch` spectrograms.
    pub fn clips(&self, micro_batch: usize) -> usize {
        (self.micro_batches.max(1) * micro_batch)
            .min(self.max_clips)
            .max(1)
    }

    /// Host bytes the read-ahead holds at its fullest at this micro-batch.
    pub fn bytes(&self, micro_batch: usize) -> u64 {
        if *self == Self::NONE {
            return 0;
        }
        self.clips(micro_batch) as u64 * self.bytes_per_clip + self.reading_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_ahead_grows_with_the_micro_batch_up_to_its_bound() {
        let r = ReadAhead {
            micro_batches: 2,
            bytes_per_clip: 64 << 10,
            max_clips: 100,
            reading_bytes: 1000,
        };
        assert_eq!(r.bytes(8), 16 * (64 << 10) + 1000);
        assert_eq!(r.clips(80), 100);
        assert_eq!(r.bytes(80), 100 * (64 << 10) + 1000);
        assert_eq!(ReadAhead::NONE.bytes(1000), 0);
    }
}
