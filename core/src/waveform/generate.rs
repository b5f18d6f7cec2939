//! Audio from a trained run: clips sampled one level at a time from the network's
//! categorical head ([`Stepper`]), each drawn from the softmax of its logits, then turned
//! back into samples by the run's quantiser.

use std::path::Path;

use burn::module::Module;
use burn::tensor::{Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::SashimiConfig;
use crate::checkpoint::CheckpointFiles;
use crate::model::NamedConfig;
use crate::model::sashimi::{LEVELS, START_LEVEL, Sashimi, Stepper};
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
    let network = loaded.model.valid();
    let samples = (seconds * f64::from(task.digits.sample_rate))
        .round()
        .max(1.0) as usize;
    let levels = sample(&network, clips, samples, seed)?;
    Ok(Generated {
        sample_rate: task.digits.sample_rate,
        clips: levels
            .iter()
            .map(|clip| clip.iter().map(|&l| task.quantizer.sample(l)).collect())
            .collect(),
    })
}

/// `clips` sequences of `samples` levels, each level drawn from the network's distribution
/// given the ones before it.
pub fn sample(
    network: &Sashimi,
    clips: usize,
    samples: usize,
    seed: u64,
) -> Result<Vec<Vec<u8>>, TrainError> {
    let device = network.devices().into_iter().next().ok_or_else(|| {
        TrainError::Task("the network has no parameters to take a device from".into())
    })?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut stepper = Stepper::new(network);
    let mut fed = vec![START_LEVEL; clips];
    let mut drawn = vec![Vec::with_capacity(samples); clips];
    for _ in 0..samples {
        let inputs = Tensor::<1, Int>::from_data(TensorData::new(fed.clone(), [clips]), &device);
        let probabilities = burn::tensor::activation::softmax(stepper.step(inputs), 1);
        let values = probabilities
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .map_err(|e| TrainError::Task(format!("reading the network's output: {e:?}")))?;
        for (clip, row) in values.chunks_exact(LEVELS).enumerate() {
            let level = draw(row, rng.random::<f32>());
            drawn[clip].push(level);
            fed[clip] = i64::from(level);
        }
    }
    Ok(drawn)
}

/// The level whose cumulative probability first reaches `u` (in [0, 1)); the last for a
/// sum that rounding leaves short.
fn draw(probabilities: &[f32], u: f32) -> u8 {
    let mut total = 0.0;
    for (level, p) in probabilities.iter().enumerate() {
        total += p;
        if u < total {
            return level as u8;
        }
    }
    (probabilities.len().min(LEVELS) - 1) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draw_follows_the_cumulative_probabilities() {
        let p = [0.25, 0.0, 0.5, 0.25];
        assert_eq!(draw(&p, 0.0), 0);
        assert_eq!(draw(&p, 0.24), 0);
        assert_eq!(draw(&p, 0.25), 2);
        assert_eq!(draw(&p, 0.74), 2);
        assert_eq!(draw(&p, 0.9), 3);
        assert_eq!(draw(&[0.3, 0.3], 0.99), 1);
    }
}
