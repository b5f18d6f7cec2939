//! From clips in host memory to micro-batches of patches, one at a time.
//!
//! The order of spectrograms and the placement of random patches are pure functions of the
//! seed and the position in the run, so a resumed run draws exactly the batches the
//! uninterrupted one would have.

use burn::tensor::{Device, Tensor, TensorData};
use headroom_datasets::patch::all_patches;
use headroom_datasets::{Clip, PATCH_SIZE, PatchError, PatchSpec};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Spectrogram values are standardised with the train split's mean and deviation, so the
/// model sees unit-scale inputs whatever the recording level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Normalization {
    pub mean: f32,
    pub std: f32,
}

impl Normalization {
    pub fn fit(clips: &[Clip]) -> Self {
        let (mut sum, mut sum_sq, mut n) = (0.0f64, 0.0f64, 0usize);
        for clip in clips {
            for &v in &clip.spectrogram.data {
                sum += v as f64;
                sum_sq += (v as f64) * (v as f64);
                n += 1;
            }
        }
        let mean = sum / n.max(1) as f64;
        let var = (sum_sq / n.max(1) as f64 - mean * mean).max(0.0);
        Self {
            mean: mean as f32,
            std: (var.sqrt() as f32).max(1e-6),
        }
    }

    fn apply(&self, values: &mut [f32]) {
        for v in values {
            *v = (*v - self.mean) / self.std;
        }
    }
}

/// Patches of several spectrograms, ready to become a `[n, 1, 64, 64]` tensor.
#[derive(Debug, Clone)]
pub struct PatchBatch {
    pub values: Vec<f32>,
    pub patches: usize,
}

impl PatchBatch {
    /// The batch in pieces of at most `max` patches, so that scoring a long clip never
    /// needs more memory than a training micro-batch.
    pub fn chunks(&self, max: usize) -> impl Iterator<Item = PatchBatch> + '_ {
        let per_patch = PATCH_SIZE * PATCH_SIZE;
        self.values
            .chunks(max.max(1) * per_patch)
            .map(move |values| PatchBatch {
                values: values.to_vec(),
                patches: values.len() / per_patch,
            })
    }

    pub fn to_tensor(self, device: &Device) -> Tensor<4> {
        Tensor::from_data(
            TensorData::new(self.values, [self.patches, 1, PATCH_SIZE, PATCH_SIZE]),
            device,
        )
    }
}

/// The train split seen as an endless sequence of shuffled epochs.
#[derive(Debug, Clone)]
pub struct TrainStream {
    clips: Vec<Clip>,
    spec: PatchSpec,
    seed: u64,
    normalization: Normalization,
}

impl TrainStream {
    pub fn new(
        clips: Vec<Clip>,
        spec: PatchSpec,
        seed: u64,
        normalization: Normalization,
    ) -> Result<Self, PatchError> {
        for clip in &clips {
            spec.check(clip.spectrogram.n_mels, clip.spectrogram.frames)?;
        }
        Ok(Self {
            clips,
            spec,
            seed,
            normalization,
        })
    }

    pub fn len(&self) -> usize {
        self.clips.len()
    }

    pub fn is_empty(&self) -> bool {
        self.clips.is_empty()
    }

    /// The train clips, in their original order.
    pub fn clips(&self) -> &[Clip] {
        &self.clips
    }

    /// The epoch that position `position` of the stream falls in.
    pub fn epoch_of(&self, position: u64) -> u64 {
        position / self.clips.len() as u64
    }

    fn order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.clips.len()).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(mix(
            self.seed, epoch, 0x0e70,
        )));
        order
    }

    /// `count` spectrograms from stream position `first` on, patched.
    pub fn batch(&self, first: u64, count: usize) -> PatchBatch {
        let n = self.clips.len() as u64;
        let mut values = Vec::with_capacity(count * self.spec.n_patches * PATCH_SIZE * PATCH_SIZE);
        let mut order = (u64::MAX, Vec::new());
        for position in first..first + count as u64 {
            let epoch = position / n;
            if order.0 != epoch {
                order = (epoch, self.order(epoch));
            }
            let clip = &self.clips[order.1[(position % n) as usize]];
            let mut rng = ChaCha8Rng::seed_from_u64(mix(self.seed, position, 0x9a7c));
            self.spec
                .extract_into(&clip.spectrogram, &mut rng, &mut values)
                .expect("every clip was checked against the patch spec in TrainStream::new");
        }
        self.normalization.apply(&mut values);
        PatchBatch {
            patches: count * self.spec.n_patches,
            values,
        }
    }
}

/// Every patch of one clip, `stride` frames apart: how validation and scoring see a clip.
pub fn clip_patches(
    clip: &Clip,
    stride: usize,
    normalization: &Normalization,
) -> Result<PatchBatch, PatchError> {
    let mut values = Vec::new();
    let patches = all_patches(&clip.spectrogram, stride, &mut values)?;
    normalization.apply(&mut values);
    Ok(PatchBatch { values, patches })
}

fn mix(seed: u64, a: u64, salt: u64) -> u64 {
    let mut h =
        seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ a.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_datasets::{Label, PatchPlacement, Spectrogram};

    #[test]
    fn a_batch_splits_into_chunks_that_keep_every_patch_in_order() {
        let per_patch = PATCH_SIZE * PATCH_SIZE;
        let batch = PatchBatch {
            values: (0..5 * per_patch).map(|v| v as f32).collect(),
            patches: 5,
        };
        let parts: Vec<PatchBatch> = batch.chunks(2).collect();
        assert_eq!(
            parts.iter().map(|p| p.patches).collect::<Vec<_>>(),
            [2, 2, 1]
        );
        let joined: Vec<f32> = parts.into_iter().flat_map(|p| p.values).collect();
        assert_eq!(joined, batch.values);
    }

    fn clips(n: usize) -> Vec<Clip> {
        (0..n)
            .map(|i| {
                let mut s = Spectrogram::zeros(64, 100);
                s.data.iter_mut().for_each(|v| *v = i as f32);
                Clip {
                    name: format!("c{i}"),
                    machine_id: 0,
                    label: Label::Normal,
                    spectrogram: s,
                }
            })
            .collect()
    }

    #[test]
    fn each_epoch_visits_every_clip_once_and_is_reproducible() {
        let spec = PatchSpec {
            n_patches: 1,
            stride: 16,
            placement: PatchPlacement::Random,
        };
        let norm = Normalization {
            mean: 0.0,
            std: 1.0,
        };
        let stream = TrainStream::new(clips(5), spec, 3, norm).unwrap();
        let firsts = |first: u64| -> Vec<f32> {
            let b = stream.batch(first, 5);
            (0..5).map(|p| b.values[p * 4096]).collect()
        };
        let mut epoch0 = firsts(0);
        assert_eq!(firsts(0), epoch0);
        assert_ne!(firsts(5), epoch0, "epochs are shuffled differently");
        epoch0.sort_by(f32::total_cmp);
        assert_eq!(epoch0, vec![0.0, 1.0, 2.0, 3.0, 4.0]);
        // A batch straddling an epoch boundary equals the two halves drawn apart.
        let whole = stream.batch(3, 4).values;
        let parts = [stream.batch(3, 2).values, stream.batch(5, 2).values].concat();
        assert_eq!(whole, parts);
    }

    #[test]
    fn normalization_standardises() {
        let norm = Normalization::fit(&clips(4));
        assert!((norm.mean - 1.5).abs() < 1e-6);
        assert!((norm.std - 1.25f32.sqrt()).abs() < 1e-5);
    }
}
