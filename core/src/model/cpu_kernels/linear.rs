//! A linear layer (`x W + b`, optionally followed by GELU) on flex as one autodiff op, its
//! rows split over the threads in fixed blocks, forward and backward.
//!
//! flex runs a matrix product on one thread under 192³ multiply-adds and an elementwise op
//! on one thread under 256 Ki elements: the recogniser's projections (`[n x frames, 64] x
//! [64, 64]` at 8 x 300 frames) and the activations around them (about 40-150 Ki) are all
//! under, so most of its transformer ran on one of two cores; the step took 34 ms on one
//! thread and 29 on two where PyTorch's twin, whose kernels split far smaller work, went
//! from 34 to 23. Here each block of rows is one product on one thread with its bias (and
//! GELU) applied while it is in cache. The weight's gradient sums per-group partial
//! products in group order: groups are fixed by the rows, not the threads, so a gradient is
//! the same with any number of threads (a run is reproducible from its seed). GELU is the exact
//! (erf) form burn's is; erf is a rational approximation the compiler vectorises (libm's
//! `erff`, which flex calls per element, was 4% of the step). Written by hand because burn
//! 0.22.1's flex has neither knob.

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

use super::exp::exp;
use super::matrix::{Mat, gemm};
use super::unwritten::Unwritten;
use super::{contiguous, register, sum_partials, tensor};

/// `x W + b` over the last axis of `x` (`W` is `[inputs, outputs]`, as burn's `Linear`
/// keeps it), then GELU when `gelu`.
#[backend_extension(Flex, Autodiff)]
pub trait HostLinear: burn::backend::Backend {
    fn host_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        gelu: bool,
    ) -> FloatTensor<Self>;
}

/// Rows per forward task, and the fewest rows of a backward group.
const BLOCK: usize = 64;

/// Backward groups at most: enough to share among the threads, few enough that their
/// partial weight gradients stay small.
const GROUPS: usize = 8;

fn dims(x: &FlexTensor, weight: &FlexTensor) -> (usize, usize, usize) {
    let w = weight.shape();
    let (inputs, outputs) = (w[0], w[1]);
    let rows = x.shape().num_elements() / inputs.max(1);
    (rows, inputs, outputs)
}

fn output_shape(x: &FlexTensor, outputs: usize) -> Shape {
    let mut dims = x.shape().to_vec();
    if let Some(last) = dims.last_mut() {
        *last = outputs;
    }
    Shape::from(dims)
}

/// The output, and with GELU the values it was applied to.
fn forward(
    x: &FlexTensor,
    weight: &FlexTensor,
    bias: &FlexTensor,
    gelu: bool,
) -> (FlexTensor, Option<Vec<f32>>) {
    let (rows, inputs, outputs) = dims(x, weight);
    let (xv, wv, bv) = (contiguous(x), contiguous(weight), contiguous(bias));
    let w = Mat::new(&wv, inputs, outputs);
    // Zeroed by the tasks that write them (`Unwritten`): on the calling thread the zeroing
    // of a large output was most of the 8% of a ViT step that went to `memset`.
    let mut z = Unwritten::new(rows * outputs);
    z.par_chunks_mut(BLOCK * outputs.max(1))
        .zip(xv.par_chunks(BLOCK * inputs.max(1)))
        .for_each(|(z, x)| {
            let block = z.len() / outputs.max(1);
            gemm(z, false, Mat::new(x, block, inputs), w);
            for row in z.chunks_mut(outputs.max(1)) {
                for (v, b) in row.iter_mut().zip(bv.iter()) {
                    *v += b;
                }
            }
        });
    let z = z.written();
    if !gelu {
        return (tensor(z, output_shape(x, outputs)), None);
    }
    let mut y = Unwritten::new(z.len());
    y.par_chunks_mut(BLOCK * outputs.max(1))
        .zip(z.par_chunks(BLOCK * outputs.max(1)))
        .for_each(|(y, z)| {
            for (y, &z) in y.iter_mut().zip(z) {
                *y = gelu_of(z);
            }
        });
    (tensor(y.written(), output_shape(x, outputs)), Some(z))
}

/// erf by XLA's and Eigen's single-precision rational approximation (odd degree 13 over
/// even degree 8, on inputs clamped to ±4, beyond which erf is ±1 in f32).
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let alpha = [
        -2.726_142_3e-10,
        2.770_681_4e-8,
        -2.101_024e-6,
        -5.692_506_4e-5,
        -7.349_906_3e-4,
        -2.954_6e-3,
        -1.609_603_3e-2,
    ];
    let beta = [
        -1.456_607_2e-5,
        -2.133_740_6e-4,
        -1.682_827e-3,
        -7.373_329e-3,
        -1.426_474e-2,
    ];
    let p = alpha.iter().fold(0.0f32, |acc, &a| acc * x2 + a);
    let q = beta.iter().fold(0.0f32, |acc, &b| acc * x2 + b);
    x * p / q
}

fn gelu_of(z: f32) -> f32 {
    0.5 * z * (1.0 + erf(z * std::f32::consts::FRAC_1_SQRT_2))
}

/// GELU's derivative: the normal CDF plus `z` times its density.
fn gelu_slope(z: f32) -> f32 {
    const INV_SQRT_2PI: f32 = 0.398_942_3;
    0.5 * (1.0 + erf(z * std::f32::consts::FRAC_1_SQRT_2)) + z * INV_SQRT_2PI * exp(-0.5 * z * z)
}

impl HostLinear for Flex {
    fn host_linear(x: FlexTensor, weight: FlexTensor, bias: FlexTensor, gelu: bool) -> FlexTensor {
        forward(&x, &weight, &bias, gelu).0
    }
}

#[derive(Debug, Clone)]
struct LinearState {
    x: NodeId,
    weight: NodeId,
    /// The values GELU was applied to, when it was.
    before_gelu: Option<std::sync::Arc<Vec<f32>>>,
}

#[derive(Debug)]
struct LinearBackward;

impl Backward<Flex, 3> for LinearBackward {
    type State = LinearState;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let upstream: FlexTensor = grads.consume::<Flex>(&ops.node);
        let state = ops.state;
        let x: FlexTensor = checkpointer.retrieve_node_output(state.x);
        let weight: FlexTensor = checkpointer.retrieve_node_output(state.weight);
        let (rows, inputs, outputs) = dims(&x, &weight);
        let (xv, wv) = (contiguous(&x), contiguous(&weight));
        let mut dz = contiguous(&upstream);
        if let Some(z) = &state.before_gelu {
            dz.to_mut()
                .par_chunks_mut(BLOCK * outputs.max(1))
                .zip(z.par_chunks(BLOCK * outputs.max(1)))
                .for_each(|(d, z)| {
                    for (d, &z) in d.iter_mut().zip(z) {
                        *d *= gelu_slope(z);
                    }
                });
        }
        let [x_node, weight_node, bias_node] = ops.parents.map(|p| p.map(|node| node.id));
        let w = Mat::new(&wv, inputs, outputs);
        // Rows in contiguous groups, at most GROUPS of them: each group's dx rows = dz Wᵀ
        // and its partial dW = xᵀ dz, db = Σ dz, one product each. Fixed by the rows alone,
        // so the partials are summed in the same order on any thread count; at most GROUPS
        // partial weights, so their memory does not grow with the rows.
        let per_group = rows.div_ceil(GROUPS).max(BLOCK);
        let groups = rows.div_ceil(per_group);
        let mut dx = Unwritten::new(if x_node.is_some() { rows * inputs } else { 0 });
        let mut partial_w = Unwritten::new(groups * inputs * outputs);
        let mut partial_b = Unwritten::new(groups * outputs);
        let group = |g: usize, pw: &mut [f32], pb: &mut [f32], dx: Option<&mut [f32]>| {
            let start = g * per_group;
            let count = per_group.min(rows - start);
            let dz = &dz[start * outputs..(start + count) * outputs];
            let x = &xv[start * inputs..(start + count) * inputs];
            gemm(
                pw,
                false,
                Mat::new(x, count, inputs).t(),
                Mat::new(dz, count, outputs),
            );
            for row in dz.chunks(outputs.max(1)) {
                for (b, d) in pb.iter_mut().zip(row) {
                    *b += d;
                }
            }
            if let Some(dx) = dx {
                gemm(dx, false, Mat::new(dz, count, outputs), w.t());
            }
        };
        let partials = partial_w
            .par_chunks_mut((inputs * outputs).max(1))
            .zip(partial_b.par_chunks_mut(outputs.max(1)))
            .enumerate();
        if x_node.is_some() {
            partials
                .zip(dx.par_chunks_mut(per_group * inputs.max(1)))
                .for_each(|((g, (pw, pb)), dx)| group(g, pw, pb, Some(dx)));
        } else {
            partials.for_each(|(g, (pw, pb))| group(g, pw, pb, None));
        }
        let (partial_w, partial_b) = (partial_w.written(), partial_b.written());
        // An input that takes no part (a network's data, as a vision transformer's tiles)
        // has no dx to make a tensor of.
        if x_node.is_some() {
            register(grads, [(x_node, tensor(dx.written(), x.shape()))]);
        }
        register(
            grads,
            [
                (
                    weight_node,
                    tensor(sum_partials(&partial_w, inputs * outputs), weight.shape()),
                ),
                (
                    bias_node,
                    tensor(sum_partials(&partial_b, outputs), Shape::new([outputs])),
                ),
            ],
        );
    }
}

impl<C: CheckpointStrategy> HostLinear for Autodiff<Flex, C> {
    fn host_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        gelu: bool,
    ) -> FloatTensor<Self> {
        match LinearBackward
            .prepare::<C>([x.node(), weight.node(), bias.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let (x_id, weight_id) = (prep.checkpoint(&x), prep.checkpoint(&weight));
                let (out, before_gelu) = forward(
                    &x.into_primitive(),
                    &weight.into_primitive(),
                    &bias.into_primitive(),
                    gelu,
                );
                let state = LinearState {
                    x: x_id,
                    weight: weight_id,
                    before_gelu: before_gelu.map(std::sync::Arc::new),
                };
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::host_linear(
                x.into_primitive(),
                weight.into_primitive(),
                bias.into_primitive(),
                gelu,
            )),
        }
    }
}

/// `x W + b` (then GELU when `gelu`) through [`HostLinear`], on flex (f32).
pub fn linear<const D: usize>(
    x: Tensor<D>,
    weight: Tensor<2>,
    bias: Tensor<1>,
    gelu: bool,
) -> Tensor<D> {
    Tensor::from_dispatch(burn::backend::Dispatch::host_linear(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        gelu,
    ))
}

#[cfg(test)]
mod tests;
