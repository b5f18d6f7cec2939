//! Batch normalisation in training (the batch's own statistics), with the ReLU6 after it
//! where the layer has one, on flex as one autodiff op that keeps its input and its output.
//!
//! burn 0.22.1's default `batch_norm_train` (flex has no own) takes each channel's
//! statistics by swapping the batch and channel axes, copying the activation to that layout
//! (twice forward, twice backward), and runs the rest as broadcast tensor ops: with the
//! copies, about a third of the id-classifier's step once its convolutions were Headroom's
//! (perf at the depthwise kernel's commit: `copy_2d_tiled` 22%, the broadcasts 15%). Here a
//! channel's sums run over its planes where they lie, in 16 lanes ([`lanes`]) and in sample
//! order, so the same on any thread count. The ReLU6 in the same pass saves its own pass
//! each way; its gradient mask is read from the output, which the next layer keeps anyway.
//! Written by hand because flex implements neither.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{AutodiffBackend, Flex, TensorMetadata, backend_extension};
use burn::module::RunningState;
use burn::nn::BatchNorm;
use burn::tensor::{Shape, Tensor};
use rayon::prelude::*;

use super::unwritten::Unwritten;
use super::{contiguous, lanes, register, tensor, writable};

const SIX: f32 = 6.0;

/// What follows the normalisation in the same op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Nothing,
    /// `max(x, 0)`, NaN kept (burn's `relu`).
    Relu,
    /// `min(max(x, 0), 6)`, NaN kept (burn's `relu6`).
    Relu6,
}

impl After {
    fn apply(self, v: f32) -> f32 {
        match self {
            After::Nothing => v,
            After::Relu => {
                if v <= 0.0 {
                    0.0
                } else {
                    v
                }
            }
            After::Relu6 => v.clamp(0.0, SIX),
        }
    }

    /// Whether the gradient passes at output `y`: where the input was inside the bounds,
    /// or NaN. At an output of exactly 0 or 6 (which an input beyond the bound gives too)
    /// masked, as PyTorch's ReLU and ReLU6 do.
    fn passes(self, y: f32) -> bool {
        match self {
            After::Nothing => true,
            After::Relu => y > 0.0 || y.is_nan(),
            After::Relu6 => y > 0.0 && y < SIX || y.is_nan(),
        }
    }
}

/// Samples per rayon task in the passes over whole samples: a sample of dcase-ae's is one
/// row of 128 values.
fn samples_per_task(sample: usize) -> usize {
    (super::CHUNK / sample.max(1)).max(1)
}

#[backend_extension(Flex, Autodiff)]
pub trait HostBatchNorm: burn::backend::Backend {
    /// Each channel's mean and biased variance over the batch and the plane, `[2, c]`, for
    /// `x` of `[n, c, h, w]`; not tracked (burn's running statistics take them detached).
    fn host_batch_statistics(x: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `x` normalised by `statistics`, times `gamma`, plus `beta`, then `after`.
    fn host_batch_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        statistics: FloatTensor<Self>,
        epsilon: f64,
        after: After,
    ) -> FloatTensor<Self>;
}

/// `[n, c, plane]` of a 4-D (or any `[n, c, ...]`) shape.
fn layout(shape: &Shape) -> [usize; 3] {
    let (n, c) = (shape[0], shape[1]);
    [n, c, shape.num_elements() / (n * c).max(1)]
}

fn statistics(x: &FlexTensor) -> FlexTensor {
    let [n, channels, plane] = layout(&x.shape());
    let values = contiguous(x);
    let count = (n * plane).max(1) as f32;
    let means: Vec<f32> = channel_sums(&values, &values, [n, channels, plane], |_, x, _| [x])
        .iter()
        .map(|[sum]| sum / count)
        .collect();
    let variances: Vec<f32> = channel_sums(&values, &values, [n, channels, plane], |c, x, _| {
        [(x - means[c]) * (x - means[c])]
    })
    .iter()
    .map(|[sum]| sum / count)
    .collect();
    tensor([means, variances].concat(), Shape::new([2, channels]))
}

/// Each channel's sums of `term(channel, a, b)` over the batch and the plane, in sample
/// order: per channel over its planes in 16 lanes, or, where a plane is one value (dcase-ae's
/// `[n, c]` rows: a lane pass per value took longer than burn's copies), row by row across
/// the channels.
fn channel_sums<const K: usize>(
    a: &[f32],
    b: &[f32],
    [n, channels, plane]: [usize; 3],
    term: impl Fn(usize, f32, f32) -> [f32; K] + Sync,
) -> Vec<[f32; K]> {
    if plane == 1 {
        let mut sums = vec![[0.0f32; K]; channels];
        for (a, b) in a.chunks(channels.max(1)).zip(b.chunks(channels.max(1))) {
            for (c, ((sum, &a), &b)) in sums.iter_mut().zip(a).zip(b).enumerate() {
                for (s, t) in sum.iter_mut().zip(term(c, a, b)) {
                    *s += t;
                }
            }
        }
        return sums;
    }
    let start = |sample: usize, c: usize| (sample * channels + c) * plane;
    (0..channels)
        .into_par_iter()
        .map(|c| {
            let rows = (0..n).map(|s| (&a[start(s, c)..][..plane], &b[start(s, c)..][..plane]));
            lanes::sums_over(rows, |a, b| term(c, a, b))
        })
        .collect()
}

/// Each channel's `(mean, 1 / sqrt(variance + epsilon))`.
fn scales(statistics: &FlexTensor, epsilon: f64) -> Vec<(f32, f32)> {
    let values = contiguous(statistics);
    let channels = values.len() / 2;
    (0..channels)
        .map(|c| {
            let std = (values[channels + c] as f64 + epsilon).sqrt() as f32;
            (values[c], 1.0 / std)
        })
        .collect()
}

fn normalize(
    x: &FlexTensor,
    gamma: &FlexTensor,
    beta: &FlexTensor,
    statistics: &FlexTensor,
    epsilon: f64,
    after: After,
) -> FlexTensor {
    let shape = x.shape();
    let [_, _, plane] = layout(&shape);
    let (values, gamma, beta) = (contiguous(x), contiguous(gamma), contiguous(beta));
    let scales = scales(statistics, epsilon);
    // Each channel's `x * scale + shift`.
    let (scale, shift): (Vec<f32>, Vec<f32>) = scales
        .iter()
        .enumerate()
        .map(|(c, &(mean, inv_std))| (gamma[c] * inv_std, beta[c] - mean * gamma[c] * inv_std))
        .unzip();
    // Zeroed by the tasks that write it (`Unwritten`), not on this thread.
    let mut y = Unwritten::new(values.len());
    // One loop per activation: a match inside the loop kept it from vectorising.
    match after {
        After::Nothing => affine_pass(&mut y, &values, [&scale, &shift], plane, |v| v),
        After::Relu => affine_pass(&mut y, &values, [&scale, &shift], plane, |v| {
            After::Relu.apply(v)
        }),
        After::Relu6 => affine_pass(&mut y, &values, [&scale, &shift], plane, |v| {
            After::Relu6.apply(v)
        }),
    }
    tensor(y.written(), shape)
}

/// `y = then(x * scale[c] + shift[c])` over `[n, c, plane]` values, a run of samples per
/// rayon task.
fn affine_pass(
    y: &mut Unwritten,
    x: &[f32],
    [scale, shift]: [&[f32]; 2],
    plane: usize,
    then: impl Fn(f32) -> f32 + Sync,
) {
    let sample = scale.len() * plane;
    y.par_chunks_mut(sample.max(1))
        .zip(x.par_chunks(sample.max(1)))
        .with_min_len(samples_per_task(sample))
        .for_each(|(y, x)| {
            if plane == 1 {
                // A row across the channels: their factors side by side, vectorised.
                let factors = scale.iter().zip(shift);
                for ((y, &x), (&scale, &shift)) in y.iter_mut().zip(x).zip(factors) {
                    *y = then(x * scale + shift);
                }
                return;
            }
            let planes = y.chunks_mut(plane).zip(x.chunks(plane));
            for ((y, x), (&scale, &shift)) in planes.zip(scale.iter().zip(shift)) {
                for (y, &x) in y.iter_mut().zip(x) {
                    *y = then(x * scale + shift);
                }
            }
        });
}

/// Zeroes the gradient `g` where the output `y` does not pass it (`passes`).
fn mask(g: &mut [f32], y: &[f32], passes: impl Fn(f32) -> bool + Sync) {
    g.par_chunks_mut(super::CHUNK)
        .zip(y.par_chunks(super::CHUNK))
        .for_each(|(g, y)| {
            for (g, &y) in g.iter_mut().zip(y) {
                *g = if passes(y) { *g } else { 0.0 };
            }
        });
}

/// The gradients of `x`, `gamma` and `beta` from the output's `dy`; `output`: the op's
/// output and what followed the normalisation, where something did (its mask).
fn backward(
    x: &FlexTensor,
    gamma: &FlexTensor,
    statistics: &FlexTensor,
    epsilon: f64,
    output: Option<(&FlexTensor, After)>,
    dy: FlexTensor,
) -> [FlexTensor; 3] {
    let shape = x.shape();
    let [n, channels, plane] = layout(&shape);
    let mut dy = writable(dy);
    if let Some((output, after)) = output {
        let (y, g) = (contiguous(output), dy.storage_mut::<f32>());
        match after {
            After::Nothing => {}
            After::Relu => mask(g, &y, |y| After::Relu.passes(y)),
            After::Relu6 => mask(g, &y, |y| After::Relu6.passes(y)),
        }
    }
    let (values, gamma) = (contiguous(x), contiguous(gamma));
    let g = dy.storage::<f32>();
    let scales = scales(statistics, epsilon);
    let count = (n * plane).max(1) as f32;
    // Per channel: the sum of the gradient (beta's) and of the gradient times the centred
    // input (gamma's, once scaled).
    let sums = channel_sums(g, &values, [n, channels, plane], |c, g, x| {
        [g, g * (x - scales[c].0)]
    });
    // Each channel's `dx = a g - b x - c`.
    let mut terms = [
        vec![0.0f32; channels],
        vec![0.0f32; channels],
        vec![0.0f32; channels],
    ];
    for c in 0..channels {
        let (mean, inv_std) = scales[c];
        let [sum, centred] = sums[c];
        let scale = gamma[c] * inv_std;
        // xhat * mean(g xhat) = (x - mean) inv_std^2 centred / count.
        let projection = scale * inv_std * inv_std * centred / count;
        terms[0][c] = scale;
        terms[1][c] = projection;
        terms[2][c] = scale * sum / count - projection * mean;
    }
    let [a, b, c] = &terms;
    let sample = channels * plane;
    let mut dx = Unwritten::new(values.len());
    dx.par_chunks_mut(sample.max(1))
        .zip(
            g.par_chunks(sample.max(1))
                .zip(values.par_chunks(sample.max(1))),
        )
        .with_min_len(samples_per_task(sample))
        .for_each(|(dx, (g, x))| {
            if plane == 1 {
                let terms = a.iter().zip(b).zip(c);
                for (((dx, &g), &x), ((&a, &b), &c)) in dx.iter_mut().zip(g).zip(x).zip(terms) {
                    *dx = a * g - b * x - c;
                }
                return;
            }
            let planes = dx
                .chunks_mut(plane)
                .zip(g.chunks(plane).zip(x.chunks(plane)));
            for ((dx, (g, x)), ((&a, &b), &c)) in planes.zip(a.iter().zip(b).zip(c)) {
                for ((dx, &g), &x) in dx.iter_mut().zip(g).zip(x) {
                    *dx = a * g - b * x - c;
                }
            }
        });
    let dgamma: Vec<f32> = sums
        .iter()
        .zip(&scales)
        .map(|([_, centred], (_, inv_std))| centred * inv_std)
        .collect();
    let dbeta: Vec<f32> = sums.iter().map(|[sum, _]| *sum).collect();
    [
        tensor(dx.written(), shape),
        tensor(dgamma, Shape::new([channels])),
        tensor(dbeta, Shape::new([channels])),
    ]
}

impl HostBatchNorm for Flex {
    fn host_batch_statistics(x: FlexTensor) -> FlexTensor {
        statistics(&x)
    }

    fn host_batch_norm(
        x: FlexTensor,
        gamma: FlexTensor,
        beta: FlexTensor,
        statistics: FlexTensor,
        epsilon: f64,
        after: After,
    ) -> FlexTensor {
        normalize(&x, &gamma, &beta, &statistics, epsilon, after)
    }
}

#[derive(Debug)]
struct BatchNormBackward;

#[derive(Debug, Clone)]
struct State {
    x: NodeId,
    gamma: NodeId,
    statistics: FlexTensor,
    epsilon: f64,
    /// The output and what followed the normalisation, where something did: it shares the
    /// output's buffer.
    output: Option<(FlexTensor, After)>,
}

impl Backward<Flex, 3> for BatchNormBackward {
    type State = State;

    fn backward(self, ops: Ops<State, 3>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let [node_x, node_gamma, node_beta] = ops.parents.map(|p| p.map(|node| node.id));
        let dy: FlexTensor = grads.consume::<Flex>(&ops.node);
        let state = ops.state;
        let x: FlexTensor = checkpointer.retrieve_node_output(state.x);
        let gamma: FlexTensor = checkpointer.retrieve_node_output(state.gamma);
        let [dx, dgamma, dbeta] = backward(
            &x,
            &gamma,
            &state.statistics,
            state.epsilon,
            state.output.as_ref().map(|(y, after)| (y, *after)),
            dy,
        );
        register(
            grads,
            [(node_x, dx), (node_gamma, dgamma), (node_beta, dbeta)],
        );
    }
}

impl<C: CheckpointStrategy> HostBatchNorm for Autodiff<Flex, C> {
    fn host_batch_statistics(x: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::from_inner(statistics(x.primitive()))
    }

    fn host_batch_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        statistics: FloatTensor<Self>,
        epsilon: f64,
        after: After,
    ) -> FloatTensor<Self> {
        let statistics = statistics.into_primitive();
        let y = normalize(
            x.primitive(),
            gamma.primitive(),
            beta.primitive(),
            &statistics,
            epsilon,
            after,
        );
        match BatchNormBackward
            .prepare::<C>([x.node(), gamma.node(), beta.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = State {
                    x: prep.checkpoint(&x),
                    gamma: prep.checkpoint(&gamma),
                    statistics,
                    epsilon,
                    output: (after != After::Nothing).then(|| (y.clone(), after)),
                };
                prep.finish(state, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }
}

/// The batch's statistics of `x` (`[n, c, ...]`), detached: `[2, c]`, each channel's mean
/// (row 0) and biased variance (row 1).
pub fn batch_statistics<const D: usize>(x: &Tensor<D>) -> Tensor<2> {
    Tensor::from_dispatch(burn::backend::Dispatch::host_batch_statistics(
        x.clone().into_dispatch(),
    ))
}

/// Batch normalisation of `x` by the batch's `statistics` (from [`batch_statistics`]),
/// then `after`, through [`HostBatchNorm`] on flex (f32).
pub fn batch_norm<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    statistics: Tensor<2>,
    epsilon: f64,
    after: After,
) -> Tensor<D> {
    Tensor::from_dispatch(burn::backend::Dispatch::host_batch_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        statistics.into_dispatch(),
        epsilon,
        after,
    ))
}

/// burn's `BatchNorm` forward in training (the batch's statistics, the running ones updated
/// as burn updates them), then `after`, by [`HostBatchNorm`]: for a layer whose `x` is on
/// flex's autodiff device in f32 and which trains (see [`trains_on_host`]).
pub fn train<const D: usize>(norm: &BatchNorm, x: Tensor<D>, after: After) -> Tensor<D> {
    let statistics = batch_statistics(&x);
    let channels = statistics.dims()[1];
    let device = x.device();
    let update = |state: &RunningState<Tensor<1>>, row: usize| {
        let batch = statistics.clone().narrow(0, row, 1).reshape([channels]);
        let running = state
            .value_sync()
            .to_device(&device)
            .mul_scalar(1.0 - norm.momentum)
            .add(batch.mul_scalar(norm.momentum));
        state.update(running.detach());
    };
    update(&norm.running_mean, 0);
    update(&norm.running_var, 1);
    batch_norm(
        x,
        norm.gamma.val(),
        norm.beta.val(),
        statistics,
        norm.epsilon,
        after,
    )
}

/// Whether `norm` in training on `x` is for [`train`]: f32 on flex's autodiff device, the
/// layer not frozen (burn's own rule for its training path).
pub fn trains_on_host<const D: usize>(norm: &BatchNorm, x: &Tensor<D>) -> bool {
    super::take(x) && x.device().is_autodiff() && norm.training.is_enabled()
}

#[cfg(test)]
mod tests {
    use burn::tensor::activation::{relu, relu6};
    use burn::tensor::module::batch_norm_train;
    use burn::tensor::{Tensor, TensorData};

    use super::super::{assert_close, values};
    use super::After;
    use crate::backend::BackendKind;

    /// Output, statistics and the gradients of the input, gamma and beta equal burn's
    /// `batch_norm_train` (then its `relu` or `relu6`), with values beyond the bounds, over
    /// planes and over rows (a plane of one value: dcase-ae's `[n, c]`). No output lies at
    /// a bound up to rounding (channel 3's inputs meet its mean exactly: shifted by its
    /// beta), where the two would round to either side.
    #[test]
    fn matches_burns_batch_norm_train() {
        let device = BackendKind::Flex.device().unwrap().autodiff();
        let c = 4;
        for (n, side) in [(3, 5), (7, 1)] {
            let count = n * c * side * side;
            let x_values: Vec<f32> = (0..count)
                .map(|i| ((i * 37 % 101) as f32 - 40.0) * 0.15)
                .collect();
            let upstream: Vec<f32> = (0..count).map(|i| 1.0 + (i % 7) as f32 * 0.3).collect();
            for after in [After::Nothing, After::Relu, After::Relu6] {
                let run = |ours: bool| {
                    let x: Tensor<4> = Tensor::from_data(
                        TensorData::new(x_values.clone(), [n, c, side, side]),
                        &device,
                    )
                    .require_grad();
                    let gamma: Tensor<1> = Tensor::from_data(
                        TensorData::new(vec![1.5f32, 0.5, 4.0, 1.0], [c]),
                        &device,
                    )
                    .require_grad();
                    let beta: Tensor<1> = Tensor::from_data(
                        TensorData::new(vec![0.5f32, -0.5, 3.0, 0.05], [c]),
                        &device,
                    )
                    .require_grad();
                    let (y, mean, variance) = if ours {
                        let statistics = super::batch_statistics(&x);
                        let y = super::batch_norm(
                            x.clone(),
                            gamma.clone(),
                            beta.clone(),
                            statistics.clone(),
                            1e-5,
                            after,
                        );
                        let mean = statistics.clone().narrow(0, 0, 1).reshape([c]);
                        (y, mean, statistics.narrow(0, 1, 1).reshape([c]))
                    } else {
                        let out = batch_norm_train(x.clone(), gamma.clone(), beta.clone(), 1e-5);
                        let y = match after {
                            After::Nothing => out.output,
                            After::Relu => relu(out.output),
                            After::Relu6 => relu6(out.output),
                        };
                        (y, out.mean, out.variance)
                    };
                    let weights = Tensor::from_data(
                        TensorData::new(upstream.clone(), [n, c, side, side]),
                        &device,
                    );
                    let grads = (y.clone() * weights).sum().backward();
                    [
                        values(y.inner()),
                        values(mean.inner()),
                        values(variance.inner()),
                        values(x.grad(&grads).unwrap()),
                        values(gamma.grad(&grads).unwrap()),
                        values(beta.grad(&grads).unwrap()),
                    ]
                };
                let (ours, theirs) = (run(true), run(false));
                let names = ["output", "mean", "variance", "dx", "dgamma", "dbeta"];
                for (i, what) in names.iter().enumerate() {
                    assert_close(
                        &ours[i],
                        &theirs[i],
                        &format!("{what}, {after:?}, {n} x {side}"),
                    );
                }
                if after != After::Nothing {
                    assert!(ours[0].contains(&0.0), "the lower bound reached");
                }
                if after == After::Relu6 {
                    assert!(ours[0].contains(&6.0), "the upper bound reached");
                }
            }
        }
    }
}
