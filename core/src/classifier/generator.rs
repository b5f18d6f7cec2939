//! The generator a classifier run mixes patches from: read from a `spec-gan` run's
//! checkpoint once, when a fresh run sizes itself for its data, checked against the
//! classifier's patches and machines, and kept as the generator's own weights. A
//! checkpoint of the classifier run then holds the generator too, so that a resumed run
//! does not need the GAN's checkpoint again.

use std::path::Path;
use std::sync::Arc;

use burn::store::{ModuleSnapshot, SafetensorsStore};
use burn::tensor::Device;

use crate::backend::BackendKind;
use crate::checkpoint::CheckpointFiles;
use crate::data::Normalization;
use crate::gan::networks::{GanNetworks, Generator};
use crate::gan::{GanConfig, GanShape};
use crate::model::{Machine, NamedConfig, PatchShape};
use crate::train::TrainError;

use super::networks::Renormalise;

/// A GAN run's generator, read.
#[derive(Debug, Clone, PartialEq)]
pub struct FrozenGenerator {
    pub shape: GanShape,
    /// How the GAN run normalised its patches.
    pub normalization: Normalization,
    /// The generator's weights, as `Module::save_into` a safetensors store writes them.
    pub weights: Arc<Vec<u8>>,
}

impl FrozenGenerator {
    /// Reads the generator of the `spec-gan` run saved at `path` (a run folder, its newest
    /// checkpoint, or a checkpoint folder) for a classifier of `patch` over `machines`.
    pub fn read(path: &Path, patch: PatchShape, machines: &[Machine]) -> Result<Self, TrainError> {
        let (files, dir) = CheckpointFiles::read(path)?;
        let state = files.state(&dir)?;
        let named = &state.config.model.name;
        if named != GanConfig::NAME {
            return Err(TrainError::Task(format!(
                "{} is a checkpoint of a {named} run; generated patches come from a {} run's \
                 checkpoint (train one with `trainer-cli train --model {}`)",
                dir.display(),
                GanConfig::NAME,
                GanConfig::NAME
            )));
        }
        let gan: GanConfig = state.config.model.config()?;
        if (gan.shape.mels, gan.shape.frames) != (patch.mels, patch.frames) {
            return Err(TrainError::Task(format!(
                "the generator in {} makes {} x {} patches (mel bands x frames) and the \
                 classifier reads {} x {}: train the GAN at the classifier's patch size",
                dir.display(),
                gan.shape.mels,
                gan.shape.frames,
                patch.mels,
                patch.frames
            )));
        }
        if gan.machines != machines {
            let names = |m: &[Machine]| {
                m.iter()
                    .map(|m| format!("{} id {:02}", m.machine_type, m.machine_id))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(TrainError::Task(format!(
                "the generator in {} makes patches of {} but this run's train split has {}: \
                 train the GAN on the same data as the classifier",
                dir.display(),
                names(&gan.machines),
                names(machines)
            )));
        }
        // Read on the CPU: only to check the weights and keep the generator's own.
        let device = BackendKind::Flex.device()?;
        let mut networks = GanNetworks::new(&gan.shape, gan.classes(), &device);
        let mut store = SafetensorsStore::from_bytes(Some(files.model));
        networks
            .load_from(&mut store)
            .map_err(|e| unreadable(&dir, e))?;
        let mut own = SafetensorsStore::from_bytes(None);
        networks
            .generator
            .save_into(&mut own)
            .map_err(|e| unreadable(&dir, e))?;
        let weights = own.get_bytes().map_err(|e| unreadable(&dir, e))?;
        Ok(Self {
            shape: gan.shape,
            normalization: state.normalization,
            weights: Arc::new(weights),
        })
    }

    /// The map from the GAN run's normalised patches to those of a run normalised by
    /// `normalization`.
    pub fn renormalise(&self, normalization: Normalization) -> Renormalise {
        let (gan, own) = (self.normalization, normalization);
        let std = f64::from(own.std).max(f64::EPSILON);
        Renormalise {
            scale: f64::from(gan.std) / std,
            shift: f64::from(gan.mean - own.mean) / std,
        }
    }
}

/// A generator of `shape` for `classes` classes on `device`, with `weights` where given
/// (a fresh run's), else to be loaded from the classifier's checkpoint (a resumed run's).
pub fn generator_on(
    shape: &GanShape,
    classes: usize,
    weights: Option<&[u8]>,
    device: &Device,
) -> Generator {
    let mut generator = Generator::new(shape, classes, device);
    if let Some(weights) = weights {
        let mut store = SafetensorsStore::from_bytes(Some(weights.to_vec()));
        // The bytes are this generator's own, saved by `FrozenGenerator::read` from a module
        // of the same shape and checked there: loading them back cannot fail.
        if let Err(error) = generator.load_from(&mut store) {
            tracing::error!(%error, "the generator's weights did not load back");
        }
    }
    generator
}

fn unreadable(dir: &Path, error: impl std::fmt::Display) -> TrainError {
    TrainError::Task(format!(
        "cannot read the generator in {}: {error}",
        dir.display()
    ))
}
