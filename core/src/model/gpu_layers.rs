//! The model's layers on cubecl devices (wgpu; the CUDA build too, untested here) as one autodiff op each:
//! convolution, bias and the ReLU after it, keeping only the layer's output for backward.
//!
//! burn's autodiff records a layer as two ops: the convolution keeps its input and the ReLU
//! keeps *its* input, the pre-activation, to mask the gradient. The next layer keeps the
//! ReLU's output as its input, so every hidden activation is held twice until backward,
//! about half of what a training step holds on wgpu (`docs/BENCHMARKS.md`, "Memory of a
//! step on wgpu"). The ReLU's gradient mask is as well read from its output (zero where the
//! output is not positive), and the output is the next layer's input, so one op that keeps
//! the output holds each activation once. Forward and backward are burn's own kernels
//! (convolution, its input and weight gradients, ReLU and its backward); nothing new runs on
//! the device, only less is kept.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::backend::ops::{ActivationOps, FloatTensorOps, ModuleOps};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Cube, TensorMetadata, backend_extension};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use burn::tensor::{DType, Device, Tensor};

/// A tensor of the cubecl backend.
type CubeTensor = FloatTensor<Cube>;

#[backend_extension(Cube, Autodiff)]
pub trait OutputOnlyLayers: burn::backend::Backend {
    /// `conv2d(x, weight) + bias`, then the ReLU when `relu`.
    fn conv_keeping_output(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self>;

    /// `conv_transpose2d(x, weight) + bias`, then the ReLU when `relu`.
    fn conv_transpose_keeping_output(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self>;
}

/// Which layer, with its options.
#[derive(Debug, Clone)]
enum Layer {
    Conv(ConvOptions<2>),
    Transpose(ConvTransposeOptions<2>),
}

fn forward(
    layer: &Layer,
    x: CubeTensor,
    weight: CubeTensor,
    bias: CubeTensor,
    relu: bool,
) -> CubeTensor {
    let y = match layer {
        Layer::Conv(options) => Cube::conv2d(x, weight, Some(bias), options.clone()),
        Layer::Transpose(options) => Cube::conv_transpose2d(x, weight, Some(bias), options.clone()),
    };
    if relu { Cube::relu(y) } else { y }
}

impl OutputOnlyLayers for Cube {
    fn conv_keeping_output(
        x: CubeTensor,
        weight: CubeTensor,
        bias: CubeTensor,
        options: ConvOptions<2>,
        relu: bool,
    ) -> CubeTensor {
        forward(&Layer::Conv(options), x, weight, bias, relu)
    }

    fn conv_transpose_keeping_output(
        x: CubeTensor,
        weight: CubeTensor,
        bias: CubeTensor,
        options: ConvTransposeOptions<2>,
        relu: bool,
    ) -> CubeTensor {
        forward(&Layer::Transpose(options), x, weight, bias, relu)
    }
}

#[derive(Debug)]
struct LayerBackward;

/// The input and weight by checkpoint id, and the output when a ReLU was applied (its sign
/// is the ReLU's gradient mask; it shares the buffer the next layer keeps as its input).
#[derive(Debug, Clone)]
struct State {
    x: NodeId,
    weight: NodeId,
    relu_output: Option<CubeTensor>,
    layer: Layer,
}

impl Backward<Cube, 3> for LayerBackward {
    type State = State;

    fn backward(self, ops: Ops<State, 3>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let [node_x, node_weight, node_bias] = ops.parents;
        let dy = grads.consume::<Cube>(&ops.node);
        let state = ops.state;
        let dy = match state.relu_output {
            Some(y) => Cube::relu_backward(y, dy),
            None => dy,
        };
        let x: CubeTensor = checkpointer.retrieve_node_output(state.x);
        let weight: CubeTensor = checkpointer.retrieve_node_output(state.weight);
        if let Some(node) = node_bias {
            // Both layers' bias gradient: the output gradient summed over batch and space.
            let channels = dy.shape()[1];
            let db = Cube::float_sum_dim(dy.clone(), 0);
            let db = Cube::float_sum_dim(Cube::float_sum_dim(db, 2), 3);
            grads.register::<Cube>(node.id, Cube::float_reshape(db, [channels].into()));
        }
        match state.layer {
            Layer::Conv(options) => {
                if let Some(node) = node_weight {
                    let dw = Cube::conv2d_weight_backward(
                        x.clone(),
                        weight.clone(),
                        dy.clone(),
                        options.clone(),
                    );
                    grads.register::<Cube>(node.id, dw);
                }
                if let Some(node) = node_x {
                    grads
                        .register::<Cube>(node.id, Cube::conv2d_x_backward(x, weight, dy, options));
                }
            }
            Layer::Transpose(options) => {
                if let Some(node) = node_weight {
                    let dw = Cube::conv_transpose2d_weight_backward(
                        x,
                        weight.clone(),
                        dy.clone(),
                        options.clone(),
                    );
                    grads.register::<Cube>(node.id, dw);
                }
                if let Some(node) = node_x {
                    let dx = Cube::conv_transpose2d_x_backward(weight, dy, options);
                    grads.register::<Cube>(node.id, dx);
                }
            }
        }
    }
}

fn tracked<C: CheckpointStrategy>(
    layer: Layer,
    x: FloatTensor<Autodiff<Cube, C>>,
    weight: FloatTensor<Autodiff<Cube, C>>,
    bias: FloatTensor<Autodiff<Cube, C>>,
    relu: bool,
) -> FloatTensor<Autodiff<Cube, C>> {
    match LayerBackward
        .prepare::<C>([x.node(), weight.node(), bias.node()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let (x_id, weight_id) = (prep.checkpoint(&x), prep.checkpoint(&weight));
            let y = forward(
                &layer,
                x.into_primitive(),
                weight.into_primitive(),
                bias.into_primitive(),
                relu,
            );
            let state = State {
                x: x_id,
                weight: weight_id,
                relu_output: relu.then(|| y.clone()),
                layer,
            };
            prep.finish(state, y)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(
            &layer,
            x.into_primitive(),
            weight.into_primitive(),
            bias.into_primitive(),
            relu,
        )),
    }
}

impl<C: CheckpointStrategy> OutputOnlyLayers for Autodiff<Cube, C> {
    fn conv_keeping_output(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self> {
        tracked::<C>(Layer::Conv(options), x, weight, bias, relu)
    }

    fn conv_transpose_keeping_output(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self> {
        tracked::<C>(Layer::Transpose(options), x, weight, bias, relu)
    }
}

/// Whether `device` is a cubecl device (these layers run there), f32 or not.
pub fn runs_on(device: &Device) -> bool {
    use burn::backend::DispatchDevice;
    matches!(
        device.clone().without_autodiff().as_dispatch(),
        DispatchDevice::Cube(_)
    )
}

/// `relu(conv2d(x, weight) + bias)` (or without the ReLU) on a cubecl device.
pub fn conv(
    x: Tensor<4>,
    weight: Tensor<4>,
    bias: Tensor<1>,
    options: ConvOptions<2>,
    relu: bool,
) -> Tensor<4> {
    debug_assert_eq!(x.dtype(), DType::F32);
    Tensor::from_dispatch(burn::backend::Dispatch::conv_keeping_output(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        options,
        relu,
    ))
}

/// The same for a transpose convolution.
pub fn conv_transpose(
    x: Tensor<4>,
    weight: Tensor<4>,
    bias: Tensor<1>,
    options: ConvTransposeOptions<2>,
    relu: bool,
) -> Tensor<4> {
    Tensor::from_dispatch(burn::backend::Dispatch::conv_transpose_keeping_output(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        options,
        relu,
    ))
}
