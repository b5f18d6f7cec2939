//! Audio from a saved run: clips sampled from its network ([`sample`]), turned back into
//! samples by the run's quantiser.

use std::path::Path;

use burn::module::Module;

use super::SashimiConfig;
use super::sampling::sample;
use crate::checkpoint::CheckpointFiles;
use crate::model::NamedConfig;
use crate::task::TrainingTask;
use crate::train::TrainError;

/// Clips made by a run's network.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    pub sample_rate: u32,
    /// Each clip's samples in [-1, 1].
    pub clips: Vec<Vec<f32>>,
}

/// `clips` clips of `seconds` each (at the run's sample rate) from the network of the run
/// saved at `path` (a checkpoint, or a run's directory), the draws fixed by `seed`. A
/// checkpoint of another model is refused with both names.
pub fn generate_from_checkpoint(
    path: &Path,
    clips: usize,
    seconds: f64,
    seed: u64,
) -> Result<Generated, TrainError> {
    let (files, dir) = CheckpointFiles::read(path)?;
    let config = files.state(&dir)?.config;
    if config.model.name != <SashimiConfig as NamedConfig>::NAME {
        return Err(TrainError::Task(format!(
            "{} holds a run of {}; audio is generated from a run of {}",
            dir.display(),
            config.model.name,
            <SashimiConfig as NamedConfig>::NAME
        )));
    }
    let task: SashimiConfig = config.model.config()?;
    let device = config.target().training_device(false)?;
    let loaded = files.decode_task(&dir, &device, |task: &SashimiConfig| {
        (task.networks(&device), task.optimizer())
    })?;
    // The weights' moving average where the run kept one, as SaShiMi samples.
    let network = loaded.average.unwrap_or(loaded.model).valid();
    let samples = (seconds * f64::from(task.sample_rate())).round().max(1.0) as usize;
    let levels = crate::readback::block_on(sample(&network, clips, samples, seed))?;
    Ok(Generated {
        sample_rate: task.sample_rate(),
        clips: levels
            .iter()
            .map(|clip| task.quantizer.samples(clip))
            .collect(),
    })
}
