//! From clips in host memory to micro-batches of patches, one at a time.
//!
//! The order of spectrograms and the placement of random patches are pure functions of the
//! seed and the position in the run, so a resumed run draws exactly the batches the
//! uninterrupted one would have.

use std::sync::Arc;

use burn::tensor::{Device, Tensor, TensorData};
use headroom_datasets::patch::all_patches;
use headroom_datasets::{
    ClipStore, FileError, FileProblem, PatchError, PatchShape, PatchSpec, Prefetch, Spectrogram,
};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::model::Patches;

/// Spectrogram values are standardised with the train split's mean and deviation, so the
/// model sees unit-scale inputs whatever the recording level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Normalization {
    pub mean: f32,
    pub std: f32,
}

impl Normalization {
    /// From the sum, the sum of squares and the count of the train split's values.
    pub fn from_moments(sum: f64, sum_sq: f64, n: usize) -> Self {
        let mean = sum / n.max(1) as f64;
        let var = (sum_sq / n.max(1) as f64 - mean * mean).max(0.0);
        Self {
            mean: mean as f32,
            std: (var.sqrt() as f32).max(1e-6),
        }
    }

    /// Fitted on `values` (the train split's).
    pub fn fit<'a>(values: impl IntoIterator<Item = &'a f32>) -> Self {
        let (mut sum, mut sum_sq, mut n) = (0.0f64, 0.0f64, 0usize);
        for &v in values {
            sum += f64::from(v);
            sum_sq += f64::from(v) * f64::from(v);
            n += 1;
        }
        Self::from_moments(sum, sum_sq, n)
    }

    pub fn apply(&self, values: &mut [f32]) {
        for v in values {
            *v = (*v - self.mean) / self.std;
        }
    }
}

/// Patches of several spectrograms, ready to become a model's [`Patches`]: `[n, 1, mels,
/// frames]` values and each patch's class.
#[derive(Debug, Clone)]
pub struct PatchBatch {
    pub values: Vec<f32>,
    pub patches: usize,
    pub shape: PatchShape,
    /// The class of each patch's clip (its machine ID among the run's).
    pub classes: Vec<i64>,
}

impl PatchBatch {
    /// The batch in pieces of at most `max` patches, so that scoring a long clip never
    /// needs more memory than a training micro-batch.
    pub fn chunks(&self, max: usize) -> impl Iterator<Item = PatchBatch> + '_ {
        let per_patch = self.shape.values().max(1);
        let max = max.max(1);
        self.values
            .chunks(max * per_patch)
            .zip(self.classes.chunks(max))
            .map(move |(values, classes)| PatchBatch {
                values: values.to_vec(),
                patches: values.len() / per_patch,
                shape: self.shape,
                classes: classes.to_vec(),
            })
    }

    pub fn to_tensor(self, device: &Device) -> Patches {
        let n = self.patches;
        let values = Tensor::from_data(
            TensorData::new(self.values, [n, 1, self.shape.mels, self.shape.frames]),
            device,
        );
        let classes = Tensor::from_data(TensorData::new(self.classes, [n]), device);
        Patches { values, classes }
    }
}

/// The train split seen as an endless sequence of shuffled epochs, read ahead on worker
/// threads. Which clip a stream position draws, and where its patches fall, depend only on
/// the seed and the position.
pub struct TrainStream {
    store: Arc<ClipStore>,
    train: Arc<Vec<usize>>,
    /// The class of each clip of the store.
    classes: Arc<Vec<i64>>,
    spec: PatchSpec,
    seed: u64,
    normalization: Normalization,
    workers: usize,
    /// Spectrograms read ahead.
    depth: usize,
    ahead: Option<Ahead>,
}

/// The read-ahead from one stream position on.
struct Ahead {
    next: u64,
    patches: Prefetch<(u64, usize), Result<ClipPatches, FileError>>,
}

/// One spectrogram's patches and its class.
type ClipPatches = (Vec<f32>, i64);

impl TrainStream {
    /// `depth`: spectrograms read ahead of the consumer; `classes`: the class of each of the
    /// store's clips.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<ClipStore>,
        train: Vec<usize>,
        classes: Arc<Vec<i64>>,
        spec: PatchSpec,
        seed: u64,
        normalization: Normalization,
        workers: usize,
        depth: usize,
    ) -> Self {
        Self {
            store,
            train: Arc::new(train),
            classes,
            spec,
            seed,
            normalization,
            workers,
            depth: depth.max(1),
            ahead: None,
        }
    }

    pub fn len(&self) -> usize {
        self.train.len()
    }

    pub fn is_empty(&self) -> bool {
        self.train.is_empty()
    }

    /// Reads `depth` spectrograms ahead from the next batch on (after the micro-batch
    /// changed); the read-ahead restarts where that batch begins.
    pub fn set_depth(&mut self, depth: usize) {
        self.depth = depth.max(1);
        self.ahead = None;
    }

    /// The epoch that position `position` of the stream falls in.
    pub fn epoch_of(&self, position: u64) -> u64 {
        position / self.train.len() as u64
    }

    /// `count` spectrograms from stream position `first` on, patched. Reading ahead goes
    /// on from where this batch ends; a batch elsewhere (a resumed run, a redone step)
    /// restarts it there.
    pub fn batch(&mut self, first: u64, count: usize) -> Result<PatchBatch, FileError> {
        if self.ahead.as_ref().is_none_or(|a| a.next != first) {
            self.ahead = Some(self.read_ahead_from(first));
        }
        let ahead = self.ahead.as_mut().expect("set just above");
        let per_clip = self.spec.n_patches;
        let mut values = Vec::with_capacity(count * per_clip * self.spec.shape.values());
        let mut classes = Vec::with_capacity(count * per_clip);
        for _ in 0..count {
            let patches = ahead.patches.next().unwrap_or_else(|| {
                Err(FileError::new(
                    "the train stream",
                    FileProblem::ReaderStopped,
                ))
            });
            ahead.next += 1;
            match patches {
                Ok((p, class)) => {
                    values.extend_from_slice(&p);
                    classes.extend(std::iter::repeat_n(class, per_clip));
                }
                Err(error) => {
                    self.ahead = None;
                    return Err(error);
                }
            }
        }
        Ok(PatchBatch {
            patches: count * per_clip,
            values,
            shape: self.spec.shape,
            classes,
        })
    }

    fn read_ahead_from(&self, first: u64) -> Ahead {
        let positions = Positions {
            next: first,
            order: EpochOrder::new(self.seed, self.train.len()),
        };
        let (store, train, classes, spec, seed, normalization) = (
            self.store.clone(),
            self.train.clone(),
            self.classes.clone(),
            self.spec,
            self.seed,
            self.normalization,
        );
        let patches = super::read_ahead(
            positions,
            self.workers,
            self.depth,
            move |(position, slot)| {
                let index = train[slot];
                let spectrogram = store.read(index)?;
                let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, position, 0x9a7c));
                let mut values = Vec::with_capacity(spec.n_patches * spec.shape.values());
                spec.extract_into(&spectrogram, &mut rng, &mut values)
                    .map_err(|e| FileError::new(store.clips()[index].describe(), e.into()))?;
                normalization.apply(&mut values);
                Ok((values, classes.get(index).copied().unwrap_or(0)))
            },
        );
        Ahead {
            next: first,
            patches,
        }
    }
}

/// Which train slot each stream position draws: every epoch is a shuffle of the train split,
/// a pure function of the seed and the epoch's number, so a resumed run draws what the
/// uninterrupted one would have. Any kind of training's stream uses it.
#[derive(Debug, Clone)]
pub struct EpochOrder {
    seed: u64,
    n: u64,
    /// The epoch last drawn from, and its order.
    current: (u64, Vec<usize>),
}

impl EpochOrder {
    /// The order of a train split of `n` items (at least one).
    pub fn new(seed: u64, n: usize) -> Self {
        Self {
            seed,
            n: n.max(1) as u64,
            current: (u64::MAX, Vec::new()),
        }
    }

    /// The train slot stream position `position` draws.
    pub fn slot(&mut self, position: u64) -> usize {
        let epoch = position / self.n;
        if self.current.0 != epoch {
            let mut order: Vec<usize> = (0..self.n as usize).collect();
            order.shuffle(&mut ChaCha8Rng::seed_from_u64(mix(
                self.seed, epoch, 0x0e70,
            )));
            self.current = (epoch, order);
        }
        self.current.1[(position % self.n) as usize]
    }
}

/// Stream positions and the train slot each draws.
struct Positions {
    next: u64,
    order: EpochOrder,
}

impl Iterator for Positions {
    type Item = (u64, usize);

    fn next(&mut self) -> Option<(u64, usize)> {
        let position = self.next;
        self.next += 1;
        Some((position, self.order.slot(position)))
    }
}

/// Every patch of `shape` in one clip, `stride` frames apart, each of the clip's `class`: how
/// validation and scoring see a clip.
pub fn clip_patches(
    spectrogram: &Spectrogram,
    shape: PatchShape,
    stride: usize,
    class: i64,
    normalization: &Normalization,
) -> Result<PatchBatch, PatchError> {
    let mut values = Vec::new();
    let patches = all_patches(spectrogram, shape, stride, &mut values)?;
    normalization.apply(&mut values);
    Ok(PatchBatch {
        values,
        patches,
        shape,
        classes: vec![class; patches],
    })
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
    use headroom_datasets::{Label, PatchPlacement};

    #[test]
    fn a_batch_splits_into_chunks_that_keep_every_patch_in_order() {
        let shape = PatchShape { mels: 8, frames: 5 };
        let per_patch = shape.values();
        let batch = PatchBatch {
            values: (0..5 * per_patch).map(|v| v as f32).collect(),
            patches: 5,
            shape,
            classes: vec![0, 1, 2, 3, 4],
        };
        let parts: Vec<PatchBatch> = batch.chunks(2).collect();
        assert_eq!(
            parts.iter().map(|p| p.patches).collect::<Vec<_>>(),
            [2, 2, 1]
        );
        assert_eq!(parts[1].classes, [2, 3]);
        let joined: Vec<f32> = parts.into_iter().flat_map(|p| p.values).collect();
        assert_eq!(joined, batch.values);
    }

    /// A store of `n` synthetic-looking clips whose values are all their index.
    fn store(n: usize) -> Arc<ClipStore> {
        use headroom_datasets::{ClipInfo, ClipReader, FeatureSettings, Origin, Split};
        let dir = std::env::temp_dir().join(format!("headroom-data-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let clips = (0..n)
            .map(|i| {
                let mut s = Spectrogram::zeros(64, 100);
                s.data.iter_mut().for_each(|v| *v = i as f32);
                let path = dir.join(format!("normal_id_00_{i:08}.npy"));
                headroom_datasets::npy::write_npy(&path, &s).unwrap();
                ClipInfo {
                    name: format!("c{i}"),
                    machine_type: "t".into(),
                    machine_id: 0,
                    split: Split::Train,
                    label: Some(Label::Normal),
                    origin: Origin::Npy(path),
                }
            })
            .collect();
        Arc::new(ClipStore::new(
            clips,
            ClipReader::new(FeatureSettings::default()),
        ))
    }

    #[test]
    fn each_epoch_visits_every_clip_once_and_is_reproducible() {
        let spec = PatchSpec {
            n_patches: 1,
            stride: 16,
            placement: PatchPlacement::Random,
            shape: PatchShape::SQUARE_64,
        };
        let classes = Arc::new(vec![0; 5]);
        let norm = Normalization {
            mean: 0.0,
            std: 1.0,
        };
        let mut stream = TrainStream::new(
            store(5),
            (0..5).collect(),
            classes.clone(),
            spec,
            3,
            norm,
            2,
            3,
        );
        let mut firsts = |first: u64| -> Vec<f32> {
            let b = stream.batch(first, 5).unwrap();
            (0..5).map(|p| b.values[p * 4096]).collect()
        };
        let mut epoch0 = firsts(0);
        assert_eq!(firsts(0), epoch0, "a redone batch reads the same clips");
        assert_ne!(firsts(5), epoch0, "epochs are shuffled differently");
        epoch0.sort_by(f32::total_cmp);
        assert_eq!(epoch0, vec![0.0, 1.0, 2.0, 3.0, 4.0]);
        // A batch straddling an epoch boundary equals the two halves drawn apart.
        let whole = stream.batch(3, 4).unwrap().values;
        let parts = [
            stream.batch(3, 2).unwrap().values,
            stream.batch(5, 2).unwrap().values,
        ]
        .concat();
        assert_eq!(whole, parts);
        // Read ahead or not, the same positions give the same patches.
        let mut fresh = TrainStream::new(store(5), (0..5).collect(), classes, spec, 3, norm, 1, 1);
        assert_eq!(fresh.batch(3, 4).unwrap().values, whole);
    }

    #[test]
    fn normalization_standardises() {
        // Values 0, 1, 2, 3 in equal numbers: mean 1.5, variance 1.25.
        let n = 6400;
        let sum = (0..4).map(|i| i as f64 * n as f64).sum();
        let sum_sq = (0..4).map(|i| (i * i) as f64 * n as f64).sum();
        let norm = Normalization::from_moments(sum, sum_sq, 4 * n);
        assert!((norm.mean - 1.5).abs() < 1e-6);
        assert!((norm.std - 1.25f32.sqrt()).abs() < 1e-5);
    }
}
