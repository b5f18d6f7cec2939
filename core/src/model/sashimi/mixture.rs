//! The discretized mixture of logistics head (PixelCNN++, Salimans et al. 2017), the output
//! seed 004's SaShiMi trains with (`n_mixtures: 6`): each position's `3 N` outputs are `N`
//! mixture logits, means and log-scales of logistic distributions over [-1, 1], and a level's
//! probability is the mixture's mass on its bin (the levels evenly spaced, the edge bins
//! taking the tails). Computed for one channel as state-spaces/s4 computes it
//! (`src/tasks/mixture.py`, `discretized_mix_logistic_loss_1d`): log-scales floored at -7,
//! and where a bin's mass is below 1e-5 the density at its centre times its width instead.

use burn::tensor::activation::{log_softmax, sigmoid, softplus};
use burn::tensor::{Int, Tensor};

use super::LEVELS;

/// Half a bin's width in [-1, 1].
const HALF_BIN: f64 = 1.0 / (LEVELS - 1) as f64;

/// Outputs per position for `mixtures` components.
pub fn width(mixtures: usize) -> usize {
    3 * mixtures
}

/// Each position's log-probability of its level, `[batch, length]`, from the head's outputs
/// `[batch, length, 3 N]` and the levels `[batch, length]`.
pub fn log_likelihood(outputs: Tensor<3>, levels: Tensor<2, Int>) -> Tensor<2> {
    let [batch, length] = levels.dims();
    let x = centre(levels.float()).reshape([batch, length, 1]);
    log_sum_exp(component_log_probs(outputs, x)).reshape([batch, length])
}

/// The log-probability of every level, `[rows, LEVELS]`, from outputs `[rows, 3 N]`: what
/// sampling draws from.
pub fn level_log_probs(outputs: Tensor<2>) -> Tensor<2> {
    let [rows, width] = outputs.dims();
    let device = outputs.device();
    let outputs = outputs
        .reshape([rows, 1, width])
        .expand([rows, LEVELS, width]);
    let levels = Tensor::<1, Int>::arange(0..LEVELS as i64, &device).float();
    let x = centre(levels)
        .reshape([1, LEVELS, 1])
        .expand([rows, LEVELS, 1]);
    log_sum_exp(component_log_probs(outputs, x)).reshape([rows, LEVELS])
}

/// A level's bin centre in [-1, 1].
fn centre<const D: usize>(levels: Tensor<D>) -> Tensor<D> {
    levels.mul_scalar(2.0 / (LEVELS - 1) as f64).sub_scalar(1.0)
}

/// Each component's log of its weight times its mass on the bin centred at `x`:
/// `[b, l, N]` from outputs `[b, l, 3 N]` and `x` `[b, l, 1]`.
fn component_log_probs(outputs: Tensor<3>, x: Tensor<3>) -> Tensor<3> {
    let [batch, length, width] = outputs.dims();
    let n = width / 3;
    let logits = outputs.clone().narrow(2, 0, n);
    let means = outputs.clone().narrow(2, n, n);
    let log_scales = outputs.narrow(2, 2 * n, n).clamp_min(-7.0);
    let x = x.expand([batch, length, n]);
    let centred = x.clone() - means;
    let inv_scale = log_scales.clone().neg().exp();
    let plus_in = inv_scale.clone() * centred.clone().add_scalar(HALF_BIN);
    let min_in = inv_scale.clone() * centred.clone().sub_scalar(HALF_BIN);
    let mass = sigmoid(plus_in.clone()) - sigmoid(min_in.clone());
    // The lowest bin takes everything below it, the highest everything above.
    let log_below_plus = plus_in.clone() - softplus(plus_in, 1.0);
    let log_above_min = softplus(min_in, 1.0).neg();
    let mid_in = inv_scale * centred;
    let log_density = mid_in.clone() - log_scales - softplus(mid_in, 1.0).mul_scalar(2.0);
    let tiny = mass.clone().lower_equal_elem(1e-5);
    let interior = mass.clamp_min(1e-12).log().mask_where(
        tiny,
        log_density.sub_scalar(((LEVELS - 1) as f64 / 2.0).ln()),
    );
    let bins = interior
        .mask_where(x.clone().greater_elem(0.999), log_above_min)
        .mask_where(x.lower_elem(-0.999), log_below_plus);
    bins + log_softmax(logits, 2)
}

/// `log(sum(exp(v)))` over the last dimension, kept as a dimension of 1.
fn log_sum_exp(values: Tensor<3>) -> Tensor<3> {
    let most = values.clone().max_dim(2).detach();
    (values - most.clone()).exp().sum_dim(2).log() + most
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution, TensorData};

    use super::*;

    fn device() -> Device {
        crate::backend::BackendKind::Flex.device().unwrap()
    }

    #[test]
    fn the_levels_probabilities_sum_to_one_and_match_the_likelihood() {
        let device = device();
        let mixtures = 3;
        // Scales from wide to narrow (log-scales -6 to 0.5), means across [-1, 1].
        let outputs = Tensor::<2>::random(
            [5, width(mixtures)],
            Distribution::Uniform(-1.2, 1.2),
            &device,
        );
        let spread = Tensor::<2>::random([5, mixtures], Distribution::Uniform(-6.0, 0.5), &device);
        let outputs = outputs.slice_assign([0..5, 2 * mixtures..3 * mixtures], spread);
        let log_probs = level_log_probs(outputs.clone());
        let sums = log_probs
            .clone()
            .exp()
            .sum_dim(1)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        for sum in sums {
            assert!((sum - 1.0).abs() < 2e-3, "a row sums to {sum}");
        }
        let levels: Vec<i64> = vec![0, 17, 128, 254, 255];
        let picked = Tensor::<2, Int>::from_data(TensorData::new(levels.clone(), [5, 1]), &device);
        let expected = log_probs
            .gather(1, picked)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let likelihood = log_likelihood(
            outputs.reshape([5, 1, width(mixtures)]),
            Tensor::from_data(TensorData::new(levels, [5, 1]), &device),
        )
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
        for (a, b) in likelihood.iter().zip(&expected) {
            assert!((a - b).abs() < 1e-5, "{a} against {b}");
        }
    }

    /// The narrowest component centred on a level puts nearly all its mass there (a bin is
    /// 4.3 of its scales wide on each side: 97% inside for an interior level), and an edge
    /// level takes its tail beyond the edge too.
    #[test]
    fn a_narrow_component_puts_its_mass_on_its_level() {
        let device = device();
        let at = |level: f32| {
            let mean = level * 2.0 / 255.0 - 1.0;
            let outputs =
                Tensor::<2>::from_data(TensorData::new(vec![0.0, mean, -7.0], [1, 3]), &device);
            level_log_probs(outputs)
                .exp()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap()
        };
        for (level, least) in [(0usize, 0.985), (100, 0.97), (255, 0.985)] {
            let p = at(level as f32);
            assert!(p[level] > least, "level {level}: {}", p[level]);
        }
    }
}
