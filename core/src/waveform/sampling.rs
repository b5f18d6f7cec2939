//! Levels sampled one at a time from the network's head ([`Stepper`]), each drawn from its
//! probabilities of the 256 levels given the ones drawn before it.

use burn::module::Module;
use burn::tensor::{Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::model::sashimi::{LEVELS, START_LEVEL, Sashimi, Stepper};
use crate::readback;
use crate::train::TrainError;

/// `clips` sequences of `samples` levels, each level drawn from the network's distribution
/// given the ones before it.
pub async fn sample(
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
        let probabilities = network.level_probabilities(stepper.step(inputs));
        let values = readback::floats(probabilities).await?;
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
