//! Group normalisation, and the ReLU after it, on flex as one autodiff op: forward one pass
//! per (example, group) row (mean, variance, the normalised row scaled and shifted per
//! channel, then the ReLU), backward one pass per row from the kept normalised rows and
//! their inverse deviations.
//!
//! burn 0.22.1 records `GroupNorm` as a reshape, a mean, a subtraction, a square, a second
//! mean, a square root, a division, a scaling and a shift, each a pass over the activations
//! on one thread below flex's parallel threshold and each keeping its own input; with the
//! ReLU after it that was a quarter of a GAN generator's step. Written by hand because burn
//! has no fused group norm with a backward on flex.

use std::sync::Arc;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Flex, TensorMetadata, backend_extension};
use burn::tensor::{Shape, Tensor};
use rayon::prelude::*;

use super::unwritten::Unwritten;
use super::{CHUNK, contiguous, lanes, register, sum_partials, tensor};

/// `relu((x - mean) / sqrt(variance + epsilon) * gamma + beta)` (the ReLU when `relu`),
/// mean and (biased) variance over each example's group of channels, `gamma` and `beta`
/// per channel, as burn's `GroupNorm` computes it.
#[backend_extension(Flex, Autodiff)]
pub trait HostGroupNorm: burn::backend::Backend {
    fn host_group_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        groups: usize,
        epsilon: f64,
        relu: bool,
    ) -> FloatTensor<Self>;
}

/// How `[n, channels, plane]` is cut into rows of one example's group.
#[derive(Debug, Clone, Copy)]
struct Rows {
    /// Channels per group.
    channels: usize,
    /// Elements per channel.
    plane: usize,
    groups: usize,
}

impl Rows {
    fn of(shape: &Shape, groups: usize) -> Self {
        let plane = (2..shape.num_dims()).map(|d| shape[d]).product();
        Self {
            channels: shape[1] / groups.max(1),
            plane,
            groups: groups.max(1),
        }
    }

    fn width(&self) -> usize {
        self.channels * self.plane
    }

    /// Rows per rayon task: about [`CHUNK`] elements, a fixed number whatever the threads,
    /// so that the parameters' gradients are summed in the same order on any machine.
    fn per_task(&self) -> usize {
        (CHUNK / self.width().max(1)).max(1)
    }

    /// The first channel of row `row`.
    fn first_channel(&self, row: usize) -> usize {
        (row % self.groups) * self.channels
    }
}

/// The output, the normalised rows and each row's inverse deviation.
fn forward(
    x: &FlexTensor,
    gamma: &FlexTensor,
    beta: &FlexTensor,
    groups: usize,
    epsilon: f64,
    relu: bool,
) -> (FlexTensor, Vec<f32>, Vec<f32>) {
    let shape = x.shape();
    let rows = Rows::of(&shape, groups);
    let (x, gamma, beta) = (contiguous(x), contiguous(gamma), contiguous(beta));
    let width = rows.width();
    let count = x.len() / width.max(1);
    // Zeroed by the tasks that write them (`Unwritten`), not on this thread.
    let mut out = Unwritten::new(x.len());
    let mut normalised = Unwritten::new(x.len());
    let mut inverse = vec![0.0f32; count];
    let per_task = rows.per_task();
    out.par_chunks_mut(width * per_task)
        .zip(normalised.par_chunks_mut(width * per_task))
        .zip(inverse.par_chunks_mut(per_task))
        .zip(x.par_chunks(width * per_task))
        .enumerate()
        .for_each(|(task, (((out, normalised), inverse), x))| {
            for (i, (((out, normalised), inverse), x)) in out
                .chunks_mut(width)
                .zip(normalised.chunks_mut(width))
                .zip(inverse.iter_mut())
                .zip(x.chunks(width))
                .enumerate()
            {
                let mean = lanes::sum(x) / width as f32;
                let variance = lanes::sum_of(x, |v| (v - mean) * (v - mean)) / width as f32;
                *inverse = 1.0 / (variance + epsilon as f32).sqrt();
                let first = rows.first_channel(task * per_task + i);
                for (c, ((out, normalised), x)) in out
                    .chunks_mut(rows.plane)
                    .zip(normalised.chunks_mut(rows.plane))
                    .zip(x.chunks(rows.plane))
                    .enumerate()
                {
                    let (g, b) = (gamma[first + c], beta[first + c]);
                    for ((o, n), &v) in out.iter_mut().zip(normalised.iter_mut()).zip(x) {
                        *n = (v - mean) * *inverse;
                        let y = *n * g + b;
                        // NaN stays NaN, as burn's ReLU keeps it; a select on every element
                        // (a store only where negative is a branch per element).
                        *o = if relu && y < 0.0 { 0.0 } else { y };
                    }
                }
            }
        });
    (tensor(out.written(), shape), normalised.written(), inverse)
}

impl HostGroupNorm for Flex {
    fn host_group_norm(
        x: FlexTensor,
        gamma: FlexTensor,
        beta: FlexTensor,
        groups: usize,
        epsilon: f64,
        relu: bool,
    ) -> FlexTensor {
        forward(&x, &gamma, &beta, groups, epsilon, relu).0
    }
}

#[derive(Debug, Clone)]
struct GroupNormState {
    gamma: NodeId,
    /// Kept where there is a ReLU: its mask is where `normalised * gamma + beta` is
    /// positive, recomputed rather than keeping the output.
    beta: Option<NodeId>,
    normalised: Arc<Vec<f32>>,
    inverse: Arc<Vec<f32>>,
    shape: Shape,
    groups: usize,
}

#[derive(Debug)]
struct GroupNormBackward;

impl Backward<Flex, 3> for GroupNormBackward {
    type State = GroupNormState;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let upstream: FlexTensor = grads.consume::<Flex>(&ops.node);
        let state = ops.state;
        let gamma: FlexTensor = checkpointer.retrieve_node_output(state.gamma);
        let beta: Option<FlexTensor> = state
            .beta
            .map(|node| checkpointer.retrieve_node_output(node));
        let (gamma, dy) = (contiguous(&gamma), contiguous(&upstream));
        let beta = beta.as_ref().map(contiguous);
        let rows = Rows::of(&state.shape, state.groups);
        let (width, per_task, channels) = (rows.width(), rows.per_task(), gamma.len());
        let mut dx = Unwritten::new(dy.len());
        // dx = inverse (g - mean(g) - n mean(g n)) with g = d gamma, n the normalised row and
        // d the output's gradient where the ReLU passed it; dgamma and dbeta sum d n and d
        // over each channel, a partial sum per task added in order.
        let partials: Vec<f32> = dx
            .par_chunks_mut(width * per_task)
            .zip(dy.par_chunks(width * per_task))
            .zip(state.normalised.par_chunks(width * per_task))
            .zip(state.inverse.par_chunks(per_task))
            .enumerate()
            .flat_map_iter(|(task, (((dx, dy), normalised), inverse))| {
                let mut sums = vec![0.0f32; 2 * channels];
                let mut d = vec![0.0f32; rows.plane];
                for (i, (((dx, dy), n), &inverse)) in dx
                    .chunks_mut(width)
                    .zip(dy.chunks(width))
                    .zip(normalised.chunks(width))
                    .zip(inverse)
                    .enumerate()
                {
                    let first = rows.first_channel(task * per_task + i);
                    let (mut mean_g, mut mean_gn) = (0.0f32, 0.0f32);
                    for (c, (dy, n)) in dy.chunks(rows.plane).zip(n.chunks(rows.plane)).enumerate()
                    {
                        let channel = first + c;
                        let g = gamma[channel];
                        d.copy_from_slice(dy);
                        if let Some(beta) = &beta {
                            let b = beta[channel];
                            for (d, &n) in d.iter_mut().zip(n) {
                                *d = if n * g + b <= 0.0 { 0.0 } else { *d };
                            }
                        }
                        let [dn, dsum] = lanes::sums(&d, n, |d, n| [d * n, d]);
                        sums[channel] += dn;
                        sums[channels + channel] += dsum;
                        mean_g += g * dsum;
                        mean_gn += g * dn;
                    }
                    mean_g /= width as f32;
                    mean_gn /= width as f32;
                    for (c, ((dx, dy), n)) in dx
                        .chunks_mut(rows.plane)
                        .zip(dy.chunks(rows.plane))
                        .zip(n.chunks(rows.plane))
                        .enumerate()
                    {
                        let channel = first + c;
                        let g = gamma[channel];
                        let b = beta.as_ref().map(|beta| beta[channel]);
                        for ((dx, &dy), &n) in dx.iter_mut().zip(dy).zip(n) {
                            let passed = b.is_none_or(|b| n * g + b > 0.0);
                            let d = if passed { dy } else { 0.0 };
                            *dx = inverse * (d * g - mean_g - n * mean_gn);
                        }
                    }
                }
                sums
            })
            .collect();
        let sums = sum_partials(&partials, 2 * channels);
        let (dgamma, dbeta) = sums.split_at(channels);
        let [x_node, gamma_node, beta_node] = ops.parents.map(|p| p.map(|node| node.id));
        let parameter = Shape::new([channels]);
        register(
            grads,
            [
                (x_node, tensor(dx.written(), state.shape)),
                (gamma_node, tensor(dgamma.to_vec(), parameter.clone())),
                (beta_node, tensor(dbeta.to_vec(), parameter)),
            ],
        );
    }
}

impl<C: CheckpointStrategy> HostGroupNorm for Autodiff<Flex, C> {
    fn host_group_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        groups: usize,
        epsilon: f64,
        relu: bool,
    ) -> FloatTensor<Self> {
        match GroupNormBackward
            .prepare::<C>([x.node(), gamma.node(), beta.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let gamma_id = prep.checkpoint(&gamma);
                let beta_id = relu.then(|| prep.checkpoint(&beta));
                let x = x.into_primitive();
                let shape = x.shape();
                let (out, normalised, inverse) = forward(
                    &x,
                    &gamma.into_primitive(),
                    &beta.into_primitive(),
                    groups,
                    epsilon,
                    relu,
                );
                let state = GroupNormState {
                    gamma: gamma_id,
                    beta: beta_id,
                    normalised: Arc::new(normalised),
                    inverse: Arc::new(inverse),
                    shape,
                    groups,
                };
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::host_group_norm(
                x.into_primitive(),
                gamma.into_primitive(),
                beta.into_primitive(),
                groups,
                epsilon,
                relu,
            )),
        }
    }
}

/// burn's `GroupNorm` forward (affine), then the ReLU when `relu`, through
/// [`HostGroupNorm`], on flex (f32).
pub fn normalise<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    groups: usize,
    epsilon: f64,
    relu: bool,
) -> Tensor<D> {
    Tensor::from_dispatch(burn::backend::Dispatch::host_group_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        groups,
        epsilon,
        relu,
    ))
}

#[cfg(test)]
mod tests {
    use burn::module::Param;
    use burn::nn::{GroupNorm, GroupNormConfig};
    use burn::tensor::activation::relu;
    use burn::tensor::{Distribution, Tensor};

    use super::normalise;
    use crate::backend::BackendKind;
    use crate::model::cpu_kernels::{assert_close, values};

    /// Output and the input's, gamma's and beta's gradients against burn's `GroupNorm`
    /// (then its ReLU), with gamma and beta moved off their initial ones and zeros.
    fn check(shape: [usize; 4], groups: usize, with_relu: bool) {
        let device = BackendKind::Flex.device().unwrap().autodiff();
        let normal = Distribution::Normal(0.0, 1.0);
        let mut norm: GroupNorm = GroupNormConfig::new(groups, shape[1]).init(&device);
        let moved = |start: f64| {
            let moved = Tensor::random([shape[1]], normal, &device).mul_scalar(0.3);
            Some(Param::from_tensor(moved.add_scalar(start).require_grad()))
        };
        norm.gamma = moved(1.0);
        norm.beta = moved(0.0);
        let x = Tensor::<4>::random(shape, normal, &device)
            .mul_scalar(2.0)
            .add_scalar(0.5);
        let upstream = Tensor::<4>::random(shape, normal, &device);
        let gradients = |ours: bool| {
            let x = x.clone().detach().require_grad();
            let gamma = norm.gamma.as_ref().unwrap().val();
            let beta = norm.beta.as_ref().unwrap().val();
            let y = if ours {
                normalise(
                    x.clone(),
                    gamma.clone(),
                    beta.clone(),
                    groups,
                    1e-5,
                    with_relu,
                )
            } else if with_relu {
                relu(norm.forward(x.clone()))
            } else {
                norm.forward(x.clone())
            };
            let grads = (y.clone() * upstream.clone()).sum().backward();
            let one = |t: Tensor<1>| values(t.grad(&grads).unwrap().reshape([1, 1, 1, -1]));
            (
                values(y),
                values(x.grad(&grads).unwrap()),
                one(gamma),
                one(beta),
            )
        };
        let (ours, theirs) = (gradients(true), gradients(false));
        let what = format!("{shape:?} in {groups} groups, relu {with_relu}");
        assert_close(&ours.0, &theirs.0, &format!("output, {what}"));
        assert_close(&ours.1, &theirs.1, &format!("input gradient, {what}"));
        assert_close(&ours.2, &theirs.2, &format!("gamma gradient, {what}"));
        assert_close(&ours.3, &theirs.3, &format!("beta gradient, {what}"));
    }

    #[test]
    fn matches_burns_group_norm_and_relu() {
        check([3, 8, 5, 6], 4, true);
        check([3, 8, 5, 6], 4, false);
        check([2, 6, 7, 3], 3, true);
        // A row wider than a task's elements and several tasks of rows.
        check([5, 16, 32, 32], 8, true);
    }
}
