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
use burn::tensor::{Shape, Tensor};
use rayon::prelude::*;

use super::{contiguous, lanes, register, tensor, writable};

const SIX: f32 = 6.0;

#[backend_extension(Flex, Autodiff)]
pub trait HostBatchNorm: burn::backend::Backend {
    /// Each channel's mean and biased variance over the batch and the plane, `[2, c]`, for
    /// `x` of `[n, c, h, w]`; not tracked (burn's running statistics take them detached).
    fn host_batch_statistics(x: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `x` normalised by `statistics`, times `gamma`, plus `beta`; clamped to `[0, 6]` where
    /// `relu6`.
    fn host_batch_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        statistics: FloatTensor<Self>,
        epsilon: f64,
        relu6: bool,
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
    let row = |sample: usize, c: usize| &values[(sample * channels + c) * plane..][..plane];
    let per_channel: Vec<[f32; 2]> = (0..channels)
        .into_par_iter()
        .map(|c| {
            let mean = (0..n).map(|s| lanes::sum_of(row(s, c), |v| v)).sum::<f32>() / count;
            let variance = (0..n)
                .map(|s| lanes::sum_of(row(s, c), |v| (v - mean) * (v - mean)))
                .sum::<f32>()
                / count;
            [mean, variance]
        })
        .collect();
    let (means, variances): (Vec<f32>, Vec<f32>) =
        per_channel.into_iter().map(|[m, v]| (m, v)).unzip();
    tensor([means, variances].concat(), Shape::new([2, channels]))
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
    relu6: bool,
) -> FlexTensor {
    let shape = x.shape();
    let [_, channels, plane] = layout(&shape);
    let (values, gamma, beta) = (contiguous(x), contiguous(gamma), contiguous(beta));
    let scales = scales(statistics, epsilon);
    let mut y = vec![0.0f32; values.len()];
    y.par_chunks_mut(plane.max(1))
        .zip(values.par_chunks(plane.max(1)))
        .enumerate()
        .for_each(|(i, (y, x))| {
            let c = i % channels;
            let (mean, inv_std) = scales[c];
            let (scale, shift) = (gamma[c] * inv_std, beta[c] - mean * gamma[c] * inv_std);
            for (y, &x) in y.iter_mut().zip(x) {
                let v = x * scale + shift;
                // NaN stays NaN, as burn's clamp keeps it.
                *y = if relu6 { v.clamp(0.0, SIX) } else { v };
            }
        });
    tensor(y, shape)
}

/// The gradients of `x`, `gamma` and `beta` from the output's `dy`; `output`: the op's
/// output where it clamped (its mask: strictly inside `(0, 6)`, as PyTorch's ReLU6).
fn backward(
    x: &FlexTensor,
    gamma: &FlexTensor,
    statistics: &FlexTensor,
    epsilon: f64,
    output: Option<&FlexTensor>,
    dy: FlexTensor,
) -> [FlexTensor; 3] {
    let shape = x.shape();
    let [n, channels, plane] = layout(&shape);
    let mut dy = writable(dy);
    if let Some(output) = output {
        let y = contiguous(output);
        dy.storage_mut::<f32>()
            .par_chunks_mut(plane.max(1))
            .zip(y.par_chunks(plane.max(1)))
            .for_each(|(g, y)| {
                for (g, &y) in g.iter_mut().zip(y) {
                    let inside = y > 0.0 && y < SIX || y.is_nan();
                    *g = if inside { *g } else { 0.0 };
                }
            });
    }
    let (values, gamma) = (contiguous(x), contiguous(gamma));
    let g = dy.storage::<f32>();
    let scales = scales(statistics, epsilon);
    let count = (n * plane).max(1) as f32;
    let start = |sample: usize, c: usize| (sample * channels + c) * plane;
    // Per channel: the sum of the gradient (beta's) and of the gradient times the centred
    // input (gamma's, once scaled).
    let sums: Vec<[f32; 2]> = (0..channels)
        .into_par_iter()
        .map(|c| {
            let mean = scales[c].0;
            (0..n).fold([0.0f32; 2], |[sum, centred], s| {
                let [a, b] = lanes::sums(
                    &g[start(s, c)..][..plane],
                    &values[start(s, c)..][..plane],
                    |g, x| [g, g * (x - mean)],
                );
                [sum + a, centred + b]
            })
        })
        .collect();
    let mut dx = vec![0.0f32; values.len()];
    dx.par_chunks_mut(plane.max(1))
        .zip(
            g.par_chunks(plane.max(1))
                .zip(values.par_chunks(plane.max(1))),
        )
        .enumerate()
        .for_each(|(i, (dx, (g, x)))| {
            let c = i % channels;
            let (mean, inv_std) = scales[c];
            let [sum, centred] = sums[c];
            let mean_g = sum / count;
            // xhat * mean(g xhat) = (x - mean) inv_std^2 centred / count.
            let projection = inv_std * inv_std * centred / count;
            let scale = gamma[c] * inv_std;
            for ((dx, &g), &x) in dx.iter_mut().zip(g).zip(x) {
                *dx = scale * (g - mean_g - (x - mean) * projection);
            }
        });
    let dgamma: Vec<f32> = sums
        .iter()
        .zip(&scales)
        .map(|([_, centred], (_, inv_std))| centred * inv_std)
        .collect();
    let dbeta: Vec<f32> = sums.iter().map(|[sum, _]| *sum).collect();
    [
        tensor(dx, shape),
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
        relu6: bool,
    ) -> FlexTensor {
        normalize(&x, &gamma, &beta, &statistics, epsilon, relu6)
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
    /// The output, where clamped: it shares the output's buffer.
    output: Option<FlexTensor>,
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
            state.output.as_ref(),
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
        relu6: bool,
    ) -> FloatTensor<Self> {
        let statistics = statistics.into_primitive();
        match BatchNormBackward
            .prepare::<C>([x.node(), gamma.node(), beta.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let (x_id, gamma_id) = (prep.checkpoint(&x), prep.checkpoint(&gamma));
                let y = normalize(
                    x.primitive(),
                    gamma.primitive(),
                    beta.primitive(),
                    &statistics,
                    epsilon,
                    relu6,
                );
                let state = State {
                    x: x_id,
                    gamma: gamma_id,
                    statistics,
                    epsilon,
                    output: relu6.then(|| y.clone()),
                };
                prep.finish(state, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(normalize(
                x.primitive(),
                gamma.primitive(),
                beta.primitive(),
                &statistics,
                epsilon,
                relu6,
            )),
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
/// then ReLU6 where `relu6`, through [`HostBatchNorm`] on flex (f32).
pub fn batch_norm<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    statistics: Tensor<2>,
    epsilon: f64,
    relu6: bool,
) -> Tensor<D> {
    Tensor::from_dispatch(burn::backend::Dispatch::host_batch_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        statistics.into_dispatch(),
        epsilon,
        relu6,
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::activation::relu6;
    use burn::tensor::module::batch_norm_train;
    use burn::tensor::{Tensor, TensorData};

    use super::super::{assert_close, values};
    use crate::backend::BackendKind;

    /// Output, statistics and the gradients of the input, gamma and beta equal burn's
    /// `batch_norm_train` (then `relu6` where clamped), with values beyond both bounds.
    #[test]
    fn matches_burns_batch_norm_train() {
        let device = BackendKind::Flex.device().unwrap().autodiff();
        let (n, c, side) = (3, 4, 5);
        let count = n * c * side * side;
        let x_values: Vec<f32> = (0..count)
            .map(|i| ((i * 37 % 101) as f32 - 40.0) * 0.15)
            .collect();
        let upstream: Vec<f32> = (0..count).map(|i| 1.0 + (i % 7) as f32 * 0.3).collect();
        for clamped in [false, true] {
            let run = |ours: bool| {
                let x: Tensor<4> = Tensor::from_data(
                    TensorData::new(x_values.clone(), [n, c, side, side]),
                    &device,
                )
                .require_grad();
                let gamma: Tensor<1> =
                    Tensor::from_data(TensorData::new(vec![1.5f32, 0.5, 2.0, 1.0], [c]), &device)
                        .require_grad();
                let beta: Tensor<1> =
                    Tensor::from_data(TensorData::new(vec![0.5f32, -0.5, 3.0, 0.0], [c]), &device)
                        .require_grad();
                let (y, mean, variance) = if ours {
                    let statistics = super::batch_statistics(&x);
                    let y = super::batch_norm(
                        x.clone(),
                        gamma.clone(),
                        beta.clone(),
                        statistics.clone(),
                        1e-5,
                        clamped,
                    );
                    let mean = statistics.clone().narrow(0, 0, 1).reshape([c]);
                    (y, mean, statistics.narrow(0, 1, 1).reshape([c]))
                } else {
                    let out = batch_norm_train(x.clone(), gamma.clone(), beta.clone(), 1e-5);
                    let y = if clamped {
                        relu6(out.output)
                    } else {
                        out.output
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
            for (i, what) in ["output", "mean", "variance", "dx", "dgamma", "dbeta"]
                .iter()
                .enumerate()
            {
                assert_close(&ours[i], &theirs[i], &format!("{what}, clamped {clamped}"));
            }
            if clamped {
                assert!(
                    ours[0].contains(&0.0) && ours[0].contains(&6.0),
                    "both bounds reached"
                );
            }
        }
    }
}
