//! Layer normalisation over the last axis on flex as one autodiff op: forward one pass per
//! row (mean, variance, the normalised row scaled and shifted), backward one pass per row
//! from the kept normalised rows and their inverse deviations.
//!
//! burn 0.22.1's `layer_norm` is a backend op that autodiff does not differentiate as one:
//! it records its default, a mean, a subtraction, a square, a second mean, a square root, a
//! division, a scaling and a shift, each a pass over the activations kept for its own
//! backward. Written by hand because burn has no fused layer norm with a backward on flex.

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
use super::{CHUNK, contiguous, lanes, register, tensor};

/// `(x - mean) / sqrt(variance + epsilon) * gamma + beta` over the last axis of `x`,
/// mean and (biased) variance taken per row, as burn's `LayerNorm` computes it.
#[backend_extension(Flex, Autodiff)]
pub trait HostLayerNorm: burn::backend::Backend {
    fn host_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self>;
}

/// Rows per rayon task: about [`CHUNK`] elements.
fn rows_per_task(width: usize) -> usize {
    (CHUNK / width.max(1)).max(1)
}

/// The output, the normalised rows and each row's inverse deviation.
fn forward(
    x: &FlexTensor,
    gamma: &FlexTensor,
    beta: &FlexTensor,
    epsilon: f64,
) -> (FlexTensor, Vec<f32>, Vec<f32>) {
    let shape = x.shape();
    let width = shape[shape.num_dims() - 1];
    let (x, gamma, beta) = (contiguous(x), contiguous(gamma), contiguous(beta));
    let rows = x.len() / width.max(1);
    // Zeroed by the tasks that write them (`Unwritten`), not on this thread.
    let mut out = Unwritten::new(x.len());
    let mut normalised = Unwritten::new(x.len());
    let mut inverse = vec![0.0f32; rows];
    let per_task = rows_per_task(width);
    out.par_chunks_mut(width * per_task)
        .zip(normalised.par_chunks_mut(width * per_task))
        .zip(inverse.par_chunks_mut(per_task))
        .zip(x.par_chunks(width * per_task))
        .for_each(|(((out, normalised), inverse), x)| {
            for (((out, normalised), inverse), x) in out
                .chunks_mut(width)
                .zip(normalised.chunks_mut(width))
                .zip(inverse.iter_mut())
                .zip(x.chunks(width))
            {
                let mean = lanes::sum(x) / width as f32;
                let variance = lanes::sum_of(x, |v| (v - mean) * (v - mean)) / width as f32;
                *inverse = 1.0 / (variance + epsilon as f32).sqrt();
                for ((((o, n), &v), &g), &b) in out
                    .iter_mut()
                    .zip(normalised.iter_mut())
                    .zip(x)
                    .zip(gamma.iter())
                    .zip(beta.iter())
                {
                    *n = (v - mean) * *inverse;
                    *o = *n * g + b;
                }
            }
        });
    (tensor(out.written(), shape), normalised.written(), inverse)
}

impl HostLayerNorm for Flex {
    fn host_layer_norm(
        x: FlexTensor,
        gamma: FlexTensor,
        beta: FlexTensor,
        epsilon: f64,
    ) -> FlexTensor {
        forward(&x, &gamma, &beta, epsilon).0
    }
}

#[derive(Debug, Clone)]
struct LayerNormState {
    gamma: NodeId,
    normalised: std::sync::Arc<Vec<f32>>,
    inverse: std::sync::Arc<Vec<f32>>,
    shape: Shape,
}

#[derive(Debug)]
struct LayerNormBackward;

impl Backward<Flex, 3> for LayerNormBackward {
    type State = LayerNormState;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let upstream: FlexTensor = grads.consume::<Flex>(&ops.node);
        let state = ops.state;
        let gamma: FlexTensor = checkpointer.retrieve_node_output(state.gamma);
        let (gamma, dy) = (contiguous(&gamma), contiguous(&upstream));
        let width = gamma.len();
        let per_task = rows_per_task(width);
        let mut dx = Unwritten::new(dy.len());
        // dx = inverse (g - mean(g) - n mean(g n)) with g = dy gamma, n the normalised row;
        // dgamma and dbeta sum dy n and dy over the rows, a partial sum per task, the
        // partials added in the tasks' order: rayon's `reduce` pairs them as its threads
        // happened to split the work, so two runs of one seed summed them differently
        // (speech-clap's parameters 1e-6 apart after 8 steps, same plan, same batches).
        let partials: Vec<(Vec<f32>, Vec<f32>)> = dx
            .par_chunks_mut(width * per_task)
            .zip(dy.par_chunks(width * per_task))
            .zip(state.normalised.par_chunks(width * per_task))
            .zip(state.inverse.par_chunks(per_task))
            .map(|(((dx, dy), normalised), inverse)| {
                let mut dgamma = vec![0.0f32; width];
                let mut dbeta = vec![0.0f32; width];
                for (((dx, dy), n), &inverse) in dx
                    .chunks_mut(width)
                    .zip(dy.chunks(width))
                    .zip(normalised.chunks(width))
                    .zip(inverse)
                {
                    let (mut mean_g, mut mean_gn) = (0.0f32, 0.0f32);
                    for (((&d, &n), &g), (dg, db)) in dy
                        .iter()
                        .zip(n)
                        .zip(gamma.iter())
                        .zip(dgamma.iter_mut().zip(dbeta.iter_mut()))
                    {
                        mean_g += d * g;
                        mean_gn += d * g * n;
                        *dg += d * n;
                        *db += d;
                    }
                    mean_g /= width as f32;
                    mean_gn /= width as f32;
                    for (((dx, &d), &n), &g) in dx.iter_mut().zip(dy).zip(n).zip(gamma.iter()) {
                        *dx = inverse * (d * g - mean_g - n * mean_gn);
                    }
                }
                (dgamma, dbeta)
            })
            .collect();
        let (mut dgamma, mut dbeta) = (vec![0.0f32; width], vec![0.0f32; width]);
        for (gb, bb) in &partials {
            dgamma.iter_mut().zip(gb).for_each(|(a, b)| *a += b);
            dbeta.iter_mut().zip(bb).for_each(|(a, b)| *a += b);
        }
        let [x_node, gamma_node, beta_node] = ops.parents.map(|p| p.map(|node| node.id));
        let parameter = Shape::new([width]);
        register(
            grads,
            [
                (x_node, tensor(dx.written(), state.shape)),
                (gamma_node, tensor(dgamma, parameter.clone())),
                (beta_node, tensor(dbeta, parameter)),
            ],
        );
    }
}

impl<C: CheckpointStrategy> HostLayerNorm for Autodiff<Flex, C> {
    fn host_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        match LayerNormBackward
            .prepare::<C>([x.node(), gamma.node(), beta.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let gamma_id = prep.checkpoint(&gamma);
                let x = x.into_primitive();
                let shape = x.shape();
                let (out, normalised, inverse) =
                    forward(&x, &gamma.into_primitive(), &beta.into_primitive(), epsilon);
                let state = LayerNormState {
                    gamma: gamma_id,
                    normalised: std::sync::Arc::new(normalised),
                    inverse: std::sync::Arc::new(inverse),
                    shape,
                };
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::host_layer_norm(
                x.into_primitive(),
                gamma.into_primitive(),
                beta.into_primitive(),
                epsilon,
            )),
        }
    }
}

/// burn's `LayerNorm` forward (with its shift) through [`HostLayerNorm`], on flex (f32).
pub fn normalise<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    epsilon: f64,
) -> Tensor<D> {
    Tensor::from_dispatch(burn::backend::Dispatch::host_layer_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        epsilon,
    ))
}

#[cfg(test)]
mod tests;
