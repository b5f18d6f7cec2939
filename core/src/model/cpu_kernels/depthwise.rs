//! A depthwise convolution (one square filter per channel: MobileNetV2's middle layer) on
//! flex as one autodiff op, forward and both gradients as loops over each channel's plane,
//! a tap at a time.
//!
//! burn 0.22.1 runs a grouped convolution on flex as a 3-D convolution per group, its input
//! gradient as a transposed convolution and its weight gradient as a convolution with batch
//! and channels swapped, each around batched transpose copies: with the copies, about 45% of
//! the id-classifier's step (perf at 9c14aca: `copy_2d_tiled` 24%, `conv3d_f32` 12%,
//! `conv_transpose3d` 10%). A plane is small (32 x 32 here) and a filter 9 taps, so a tap's
//! pass over a row is a short multiply-add the compiler vectorises, and no matrix is built.
//! Written by hand because neither burn nor a crate has a depthwise kernel for flex.

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Flex, TensorMetadata, backend_extension};
use burn::tensor::{Shape, Tensor};
use rayon::prelude::*;

use super::plane::{Plane, Scratch};
use super::unwritten::Unwritten;
use super::{contiguous, register, tensor};

/// `x` (`[n, c, h, w]`) convolved with one `k x k` filter per channel (`weight`:
/// `[c, 1, k, k]`), the same stride and padding on both axes, no bias.
#[backend_extension(Flex, Autodiff)]
pub trait HostDepthwise: burn::backend::Backend {
    fn host_depthwise(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        stride: usize,
        padding: usize,
    ) -> FloatTensor<Self>;
}

/// The plane of `x` (`[n, c, h, w]`) under `weight`'s filters.
fn plane_of(x: &FlexTensor, weight: &FlexTensor, stride: usize, padding: usize) -> Plane {
    let shape = x.shape();
    Plane::new([shape[2], shape[3]], weight.shape()[2], stride, padding)
}

fn forward(plane: Plane, x: &[f32], w: &[f32], y: &mut [f32], scratch: &mut Scratch) {
    let (phases, flat) = scratch.sized(plane, [1, 1]);
    plane.split(x, phases);
    flat.fill(0.0);
    plane.add_taps(phases, w, flat);
    plane.crop(flat, y);
}

/// The input gradient: each tap's products added back where its inputs were read.
fn input_gradient(plane: Plane, dy: &[f32], w: &[f32], dx: &mut [f32], scratch: &mut Scratch) {
    let (phases, flat) = scratch.sized(plane, [1, 1]);
    plane.widen(dy, flat);
    phases.fill(0.0);
    plane.scatter_taps(flat, w, phases);
    plane.join(phases, dx);
}

/// Adds each tap's gradient over one plane to `dw` (`k * k`).
fn add_weight_gradient(plane: Plane, x: &[f32], dy: &[f32], dw: &mut [f32], scratch: &mut Scratch) {
    let (phases, flat) = scratch.sized(plane, [1, 1]);
    plane.split(x, phases);
    plane.widen(dy, flat);
    plane.add_tap_dots(flat, phases, dw);
}

fn depthwise_forward(x: &FlexTensor, weight: &FlexTensor, plane: Plane) -> FlexTensor {
    let shape = x.shape();
    let channels = shape[1];
    let (x, w) = (contiguous(x), contiguous(weight));
    let (large, small) = (plane.large_len(), plane.small_len());
    let taps = plane.kernel * plane.kernel;
    // Zeroed by the tasks that write it (`Unwritten`), not on this thread.
    let mut y = Unwritten::new(shape[0] * channels * small);
    // rayon's per-piece scratch, not `PerThread`'s: an item here is one plane, thousands a
    // call, and a lock per item made an id-classifier step 2.4% slower (2026-11-29, 12
    // paired runs).
    y.par_chunks_mut(small.max(1)).enumerate().for_each_init(
        Scratch::default,
        |scratch, (i, y)| {
            let c = i % channels;
            forward(
                plane,
                &x[i * large..][..large],
                &w[c * taps..][..taps],
                y,
                scratch,
            );
        },
    );
    tensor(
        y.written(),
        Shape::new([shape[0], channels, plane.small[0], plane.small[1]]),
    )
}

/// The input gradient (when `input`) and the weight gradient (when `weight`) from `dy`.
fn depthwise_backward(
    x: &FlexTensor,
    weight: &FlexTensor,
    dy: &FlexTensor,
    plane: Plane,
    [input, weight_wanted]: [bool; 2],
) -> [Option<FlexTensor>; 2] {
    let (x_shape, w_shape) = (x.shape(), weight.shape());
    let (n, channels) = (x_shape[0], x_shape[1]);
    let (x, w, dy) = (contiguous(x), contiguous(weight), contiguous(dy));
    let (large, small) = (plane.large_len(), plane.small_len());
    let taps = plane.kernel * plane.kernel;
    let dx = input.then(|| {
        let mut dx = Unwritten::new(n * channels * large);
        dx.par_chunks_mut(large.max(1)).enumerate().for_each_init(
            Scratch::default,
            |scratch, (i, dx)| {
                let c = i % channels;
                let (dy, w) = (&dy[i * small..][..small], &w[c * taps..][..taps]);
                input_gradient(plane, dy, w, dx, scratch);
            },
        );
        tensor(dx.written(), x_shape)
    });
    // A channel's taps summed over the samples in order: the same on any thread count.
    let dw = weight_wanted.then(|| {
        let mut dw = vec![0.0f32; channels * taps];
        dw.par_chunks_mut(taps)
            .enumerate()
            .for_each_init(Scratch::default, |scratch, (c, dw)| {
                for sample in 0..n {
                    let i = sample * channels + c;
                    let (x, dy) = (&x[i * large..][..large], &dy[i * small..][..small]);
                    add_weight_gradient(plane, x, dy, dw, scratch);
                }
            });
        tensor(dw, w_shape)
    });
    [dx, dw]
}

impl HostDepthwise for Flex {
    fn host_depthwise(
        x: FlexTensor,
        weight: FlexTensor,
        stride: usize,
        padding: usize,
    ) -> FlexTensor {
        let plane = plane_of(&x, &weight, stride, padding);
        depthwise_forward(&x, &weight, plane)
    }
}

#[derive(Debug)]
struct DepthwiseBackward;

#[derive(Debug, Clone)]
struct State {
    x: NodeId,
    weight: NodeId,
    plane: Plane,
}

impl Backward<Flex, 2> for DepthwiseBackward {
    type State = State;

    fn backward(self, ops: Ops<State, 2>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let [node_x, node_weight] = ops.parents.map(|p| p.map(|node| node.id));
        let dy: FlexTensor = grads.consume::<Flex>(&ops.node);
        let x: FlexTensor = checkpointer.retrieve_node_output(ops.state.x);
        let weight: FlexTensor = checkpointer.retrieve_node_output(ops.state.weight);
        let [dx, dw] = depthwise_backward(
            &x,
            &weight,
            &dy,
            ops.state.plane,
            [node_x.is_some(), node_weight.is_some()],
        );
        if let Some(dx) = dx {
            register(grads, [(node_x, dx)]);
        }
        if let Some(dw) = dw {
            register(grads, [(node_weight, dw)]);
        }
    }
}

impl<C: CheckpointStrategy> HostDepthwise for Autodiff<Flex, C> {
    fn host_depthwise(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        stride: usize,
        padding: usize,
    ) -> FloatTensor<Self> {
        let plane = plane_of(x.primitive(), weight.primitive(), stride, padding);
        let y = depthwise_forward(x.primitive(), weight.primitive(), plane);
        match DepthwiseBackward
            .prepare::<C>([x.node(), weight.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = State {
                    x: prep.checkpoint(&x),
                    weight: prep.checkpoint(&weight),
                    plane,
                };
                prep.finish(state, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }
}

/// A depthwise convolution (`weight`: `[channels, 1, k, k]`, no bias) through
/// [`HostDepthwise`], on flex (f32).
pub fn depthwise(x: Tensor<4>, weight: Tensor<4>, stride: usize, padding: usize) -> Tensor<4> {
    Tensor::from_dispatch(burn::backend::Dispatch::host_depthwise(
        x.into_dispatch(),
        weight.into_dispatch(),
        stride,
        padding,
    ))
}

#[cfg(test)]
mod tests {
    use burn::tensor::module::conv2d;
    use burn::tensor::ops::ConvOptions;
    use burn::tensor::{Tensor, TensorData};

    use super::super::{assert_close, values};
    use crate::backend::BackendKind;

    /// Outputs and both gradients equal burn's grouped convolution, at stride 1 and 2, odd
    /// and even sides, padding 1 and none.
    #[test]
    fn matches_burns_grouped_convolution() {
        let device = BackendKind::Flex.device().unwrap().autodiff();
        for (side, stride, padding, kernel) in [
            (8, 1, 1, 3),
            (9, 2, 1, 3),
            (8, 2, 1, 3),
            (7, 1, 0, 3),
            (6, 1, 2, 5),
        ] {
            let (n, c) = (3, 5);
            let x_values: Vec<f32> = (0..n * c * side * side)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.02)
                .collect();
            let w_values: Vec<f32> = (0..c * kernel * kernel)
                .map(|i| ((i * 13 % 29) as f32 - 14.0) * 0.05)
                .collect();
            let run = |ours: bool| {
                let x: Tensor<4> = Tensor::from_data(
                    TensorData::new(x_values.clone(), [n, c, side, side]),
                    &device,
                )
                .require_grad();
                let w: Tensor<4> = Tensor::from_data(
                    TensorData::new(w_values.clone(), [c, 1, kernel, kernel]),
                    &device,
                )
                .require_grad();
                let y = if ours {
                    super::depthwise(x.clone(), w.clone(), stride, padding)
                } else {
                    let options = ConvOptions::new([stride; 2], [padding; 2], [1; 2], c);
                    conv2d(x.clone(), w.clone(), None, options)
                };
                let upstream = Tensor::from_data(
                    TensorData::new(
                        (0..y.shape().num_elements())
                            .map(|i| 1.0 + (i % 7) as f32 * 0.3)
                            .collect::<Vec<f32>>(),
                        y.shape(),
                    ),
                    &device,
                );
                let grads = (y.clone() * upstream).sum().backward();
                let dx = x.grad(&grads).unwrap();
                let dw = w.grad(&grads).unwrap();
                (values(y.inner()), values(dx), values(dw))
            };
            let (ours, theirs) = (run(true), run(false));
            let what = format!("side {side}, stride {stride}, padding {padding}, kernel {kernel}");
            assert_close(&ours.0, &theirs.0, &format!("output, {what}"));
            assert_close(&ours.1, &theirs.1, &format!("input gradient, {what}"));
            assert_close(&ours.2, &theirs.2, &format!("weight gradient, {what}"));
        }
    }
}
