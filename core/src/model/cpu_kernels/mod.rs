//! The model's convolutions on flex with their gradients computed by [`unfold`]'s kernels,
//! wired in through burn's backend-extension mechanism.
//!
//! Forward stays burn's own (flex's im2col/col2im GEMMs are fast there). Backward is ours:
//! burn's default computes a weight gradient as a convolution with batch and channels
//! swapped, GEMMs of 9-16 rows that ran at a third of the machine's speed and took 40% of
//! a CPU training step (docs/BENCHMARKS.md). Only flex implements the extension: other
//! devices keep burn's convolutions (see `model::conv`).

pub mod unfold;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::backend::flex::FlexTensor;
use burn::backend::ops::ModuleOps;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Flex, TensorMetadata, backend_extension};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use burn::tensor::{DType, Shape, Tensor, TensorData};

use unfold::{Wanted, Window};

/// Convolutions without bias whose backward runs [`unfold`]'s kernels. Square kernels,
/// equal stride and padding on both axes, no dilation or groups: the default model's.
#[backend_extension(Flex, Autodiff)]
pub trait UnfoldedConv: burn::backend::Backend {
    fn unfolded_conv(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        stride: usize,
        padding: usize,
    ) -> FloatTensor<Self>;

    fn unfolded_conv_transpose(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        stride: usize,
        padding: usize,
    ) -> FloatTensor<Self>;
}

fn conv_options(stride: usize, padding: usize) -> ConvOptions<2> {
    ConvOptions::new([stride; 2], [padding; 2], [1; 2], 1)
}

fn conv_transpose_options(stride: usize, padding: usize) -> ConvTransposeOptions<2> {
    ConvTransposeOptions::new([stride; 2], [padding; 2], [0; 2], [1; 2], 1)
}

// Forward is flex's own: our unfolded-GEMM forward measured the same within noise
// (docs/BENCHMARKS.md), so burn's code stays in charge of it.
impl UnfoldedConv for Flex {
    fn unfolded_conv(
        x: FlexTensor,
        weight: FlexTensor,
        stride: usize,
        padding: usize,
    ) -> FlexTensor {
        <Flex as ModuleOps<Flex>>::conv2d(x, weight, None, conv_options(stride, padding))
    }

    fn unfolded_conv_transpose(
        x: FlexTensor,
        weight: FlexTensor,
        stride: usize,
        padding: usize,
    ) -> FlexTensor {
        <Flex as ModuleOps<Flex>>::conv_transpose2d(
            x,
            weight,
            None,
            conv_transpose_options(stride, padding),
        )
    }
}

/// A tensor's values in order, copied only when not already contiguous f32.
fn contiguous(t: &FlexTensor) -> std::borrow::Cow<'_, [f32]> {
    match t.as_slice::<f32>() {
        Some(values) => std::borrow::Cow::Borrowed(values),
        None => std::borrow::Cow::Owned(
            t.to_contiguous()
                .into_data()
                .convert::<f32>()
                .try_into_vec::<f32>()
                .unwrap_or_default(),
        ),
    }
}

fn tensor(values: Vec<f32>, shape: Shape) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape))
}

fn dims4(t: &FlexTensor) -> [usize; 4] {
    let shape = t.shape();
    [shape[0], shape[1], shape[2], shape[3]]
}

#[derive(Debug)]
struct ConvBackward;

#[derive(Debug)]
struct ConvTransposeBackward;

/// What backward needs: the inputs' checkpoint ids, stride and padding.
type State = (NodeId, NodeId, usize, usize);

impl Backward<Flex, 2> for ConvBackward {
    type State = State;

    fn backward(self, ops: Ops<State, 2>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let [node_x, node_weight] = ops.parents;
        let dy = grads.consume::<Flex>(&ops.node);
        let (x_id, weight_id, stride, padding) = ops.state;
        let x: FlexTensor = checkpointer.retrieve_node_output(x_id);
        let weight: FlexTensor = checkpointer.retrieve_node_output(weight_id);
        let [_, cin, height, width] = dims4(&x);
        let [out, _, kernel, _] = dims4(&weight);
        let [_, _, oh, ow] = dims4(&dy);
        let window = Window {
            channels: cin,
            large: [height, width],
            small: [oh, ow],
            kernel,
            stride,
            padding,
        };
        let wanted = Wanted {
            input: node_x.is_some(),
            weight: node_weight.is_some(),
        };
        let (dx, dw) = unfold::conv_backward(
            window,
            &contiguous(&x),
            &contiguous(&weight),
            &contiguous(&dy),
            out,
            wanted,
        );
        if let (Some(node), Some(dx)) = (node_x, dx) {
            grads.register::<Flex>(node.id, tensor(dx, x.shape()));
        }
        if let (Some(node), Some(dw)) = (node_weight, dw) {
            grads.register::<Flex>(node.id, tensor(dw, weight.shape()));
        }
    }
}

impl Backward<Flex, 2> for ConvTransposeBackward {
    type State = State;

    fn backward(self, ops: Ops<State, 2>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let [node_x, node_weight] = ops.parents;
        let dy = grads.consume::<Flex>(&ops.node);
        let (x_id, weight_id, stride, padding) = ops.state;
        let x: FlexTensor = checkpointer.retrieve_node_output(x_id);
        let weight: FlexTensor = checkpointer.retrieve_node_output(weight_id);
        let [_, cin, _, _] = dims4(&x);
        let [_, cout, kernel, _] = dims4(&weight);
        let [_, _, oh, ow] = dims4(&dy);
        let [_, _, height, width] = dims4(&x);
        let window = Window {
            channels: cout,
            large: [oh, ow],
            small: [height, width],
            kernel,
            stride,
            padding,
        };
        let wanted = Wanted {
            input: node_x.is_some(),
            weight: node_weight.is_some(),
        };
        let (dx, dw) = unfold::conv_transpose_backward(
            window,
            &contiguous(&x),
            &contiguous(&weight),
            &contiguous(&dy),
            cin,
            wanted,
        );
        if let (Some(node), Some(dx)) = (node_x, dx) {
            grads.register::<Flex>(node.id, tensor(dx, x.shape()));
        }
        if let (Some(node), Some(dw)) = (node_weight, dw) {
            grads.register::<Flex>(node.id, tensor(dw, weight.shape()));
        }
    }
}

impl<C: CheckpointStrategy> UnfoldedConv for Autodiff<Flex, C> {
    fn unfolded_conv(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        stride: usize,
        padding: usize,
    ) -> FloatTensor<Self> {
        match ConvBackward
            .prepare::<C>([x.node(), weight.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = (
                    prep.checkpoint(&x),
                    prep.checkpoint(&weight),
                    stride,
                    padding,
                );
                let y = Flex::unfolded_conv(
                    x.into_primitive(),
                    weight.into_primitive(),
                    stride,
                    padding,
                );
                prep.finish(state, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::unfolded_conv(
                x.into_primitive(),
                weight.into_primitive(),
                stride,
                padding,
            )),
        }
    }

    fn unfolded_conv_transpose(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        stride: usize,
        padding: usize,
    ) -> FloatTensor<Self> {
        match ConvTransposeBackward
            .prepare::<C>([x.node(), weight.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = (
                    prep.checkpoint(&x),
                    prep.checkpoint(&weight),
                    stride,
                    padding,
                );
                let y = Flex::unfolded_conv_transpose(
                    x.into_primitive(),
                    weight.into_primitive(),
                    stride,
                    padding,
                );
                prep.finish(state, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::unfolded_conv_transpose(
                x.into_primitive(),
                weight.into_primitive(),
                stride,
                padding,
            )),
        }
    }
}

/// Whether `device` runs these kernels (flex, with or without autodiff, f32).
pub fn runs_on(device: &burn::tensor::Device) -> bool {
    *device == burn::tensor::Device::flex()
}

/// A convolution without bias through [`UnfoldedConv`]; `x` and `weight` on flex, f32.
pub fn conv(x: Tensor<4>, weight: Tensor<4>, stride: usize, padding: usize) -> Tensor<4> {
    debug_assert_eq!(x.dtype(), DType::F32);
    Tensor::from_dispatch(burn::backend::Dispatch::unfolded_conv(
        x.into_dispatch(),
        weight.into_dispatch(),
        stride,
        padding,
    ))
}

/// A transpose convolution without bias through [`UnfoldedConv`].
pub fn conv_transpose(x: Tensor<4>, weight: Tensor<4>, stride: usize, padding: usize) -> Tensor<4> {
    Tensor::from_dispatch(burn::backend::Dispatch::unfolded_conv_transpose(
        x.into_dispatch(),
        weight.into_dispatch(),
        stride,
        padding,
    ))
}
