//! How an optimizer step is split: micro-batches of spectrograms, patches cut from each, and
//! micro-batches per step. The one place these numbers are combined into the step they make
//! (its spectrograms, its patches, each micro-batch's size); a run's configuration, a plan and
//! the planner's candidates each hold one.

use crate::precision::Precision;

/// micro-batch x patches x accumulation = the effective batch, except that the last
/// micro-batch of a step may hold fewer spectrograms (`step_clips`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Spectrograms per micro-batch (the last of a step may hold fewer).
    pub micro_batch: usize,
    /// Patches cut from each spectrogram.
    pub n_patches: usize,
    /// Micro-batches per optimizer step.
    pub accumulation: usize,
    /// Spectrograms per step, when that is not `micro_batch x accumulation`.
    pub step_clips: Option<usize>,
}

impl Split {
    /// An even split: every micro-batch full.
    pub fn even(micro_batch: usize, n_patches: usize, accumulation: usize) -> Self {
        Self {
            micro_batch,
            n_patches,
            accumulation,
            step_clips: None,
        }
    }

    /// `clips` spectrograms per step in micro-batches of at most `micro_batch`, the last the
    /// rest.
    pub fn of_step(clips: usize, micro_batch: usize, n_patches: usize) -> Self {
        let mb = micro_batch.clamp(1, clips.max(1));
        let accumulation = clips.div_ceil(mb);
        Self {
            micro_batch: mb,
            n_patches,
            accumulation,
            step_clips: (mb * accumulation != clips).then_some(clips),
        }
    }

    /// Spectrograms per optimizer step.
    pub fn clips_per_step(&self) -> usize {
        self.step_clips
            .unwrap_or(self.micro_batch * self.accumulation)
    }

    /// Patches per optimizer step.
    pub fn effective_batch(&self) -> usize {
        self.clips_per_step() * self.n_patches
    }

    /// Patches in a full micro-batch: what one forward and backward holds at most.
    pub fn patches_per_micro_batch(&self) -> usize {
        self.micro_batch * self.n_patches
    }

    /// Spectrograms in the step's last micro-batch.
    pub fn last_micro_batch(&self) -> usize {
        self.clips_per_step()
            .saturating_sub((self.accumulation.max(1) - 1) * self.micro_batch)
    }

    /// Spectrograms in each micro-batch of a step: `micro_batch` each, the last the rest.
    pub fn micro_batch_sizes(&self) -> Vec<usize> {
        let clips = self.clips_per_step();
        let mb = self.micro_batch.max(1);
        (0..clips.div_ceil(mb))
            .map(|i| mb.min(clips - i * mb))
            .collect()
    }

    /// The same step in micro-batches of at most `micro_batch` spectrograms.
    pub fn with_micro_batch(&self, micro_batch: usize) -> Self {
        Self::of_step(self.clips_per_step(), micro_batch, self.n_patches)
    }

    /// "micro-batch 35 x 4 patches x accumulation 3 (the last 30), checkpointing, f16 compute".
    pub fn words(&self, checkpointing: bool, precision: Precision) -> String {
        let (micro_batch, n_patches, accumulation) =
            (self.micro_batch, self.n_patches, self.accumulation);
        let last = self.last_micro_batch();
        let rest = if last == micro_batch {
            String::new()
        } else {
            format!(" (the last {last})")
        };
        let half = match precision {
            Precision::F32 => String::new(),
            p => format!(", {p} compute"),
        };
        format!(
            "micro-batch {micro_batch} x {n_patches} patches x accumulation {accumulation}{rest}{}{half}",
            if checkpointing { ", checkpointing" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_keeps_its_spectrograms_whatever_its_micro_batch() {
        let step = Split::of_step(30, 8, 4);
        assert_eq!((step.micro_batch, step.accumulation), (8, 4));
        assert_eq!(step.micro_batch_sizes(), [8, 8, 8, 6]);
        assert_eq!(step.last_micro_batch(), 6);
        assert_eq!(step.effective_batch(), 120);
        assert_eq!(step.patches_per_micro_batch(), 32);
        let finer = step.with_micro_batch(7);
        assert_eq!(finer.micro_batch_sizes(), [7, 7, 7, 7, 2]);
        assert_eq!(finer.effective_batch(), 120);
        let even = step.with_micro_batch(10);
        assert_eq!((even.accumulation, even.step_clips), (3, None));
        assert_eq!(even, Split::even(10, 4, 3));
        // A micro-batch larger than the step is the step.
        assert_eq!(step.with_micro_batch(64), Split::even(30, 4, 1));
    }

    #[test]
    fn a_split_in_words_names_the_short_last_micro_batch() {
        assert_eq!(
            Split::of_step(100, 35, 4).words(true, Precision::F16),
            "micro-batch 35 x 4 patches x accumulation 3 (the last 30), checkpointing, f16 compute"
        );
        assert_eq!(
            Split::even(8, 4, 1).words(false, Precision::F32),
            "micro-batch 8 x 4 patches x accumulation 1"
        );
    }
}
