//! The model's convolutions on flex with their gradients computed by [`unfold`]'s kernels,
//! wired in through burn's backend-extension mechanism.
//!
//! Forward stays burn's own (flex's im2col/col2im GEMMs are fast there), with the bias and
//! the ReLU that follows most layers applied in the same call, on the output in place; the
//! separate bias and ReLU passes (forward and backward) of the plain path go. Backward is ours:
//! burn's default computes a weight gradient as a convolution with batch and channels
//! swapped, GEMMs of 9-16 rows (gemm's narrow `x1x6` micro-kernel was 14% of a step's
//! samples); weight gradients took about 40% of a CPU training step (docs/BENCHMARKS.md).
//! Only flex implements the extension: other devices keep burn's convolutions (see
//! `model::conv`).

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

use rayon::prelude::*;
use unfold::{Wanted, Window};

/// A layer's convolution (or transpose convolution) with its bias and, when `relu`, the
/// ReLU after it; backward through [`unfold`]'s kernels. Square kernels, equal stride and
/// padding on both axes, no dilation or groups: the default model's layers.
#[backend_extension(Flex, Autodiff)]
pub trait UnfoldedConv: burn::backend::Backend {
    fn unfolded_conv(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        stride: usize,
        padding: usize,
        relu: bool,
    ) -> FloatTensor<Self>;

    fn unfolded_conv_transpose(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        stride: usize,
        padding: usize,
        relu: bool,
    ) -> FloatTensor<Self>;
}

/// Which of the two layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Conv,
    Transpose,
}

/// Elements per rayon task in the elementwise passes: large enough to amortise a task,
/// small enough to split a micro-batch's activations over the threads.
const CHUNK: usize = 1 << 14;

/// Flex's own layer without bias, then one parallel pass over the output in place: the
/// bias added and, when `relu`, the ReLU.
fn forward(
    kind: Kind,
    x: FlexTensor,
    weight: FlexTensor,
    bias: FlexTensor,
    stride: usize,
    padding: usize,
    relu: bool,
) -> FlexTensor {
    let y = match kind {
        Kind::Conv => <Flex as ModuleOps<Flex>>::conv2d(
            x,
            weight,
            None,
            ConvOptions::new([stride; 2], [padding; 2], [1; 2], 1),
        ),
        Kind::Transpose => <Flex as ModuleOps<Flex>>::conv_transpose2d(
            x,
            weight,
            None,
            ConvTransposeOptions::new([stride; 2], [padding; 2], [0; 2], [1; 2], 1),
        ),
    };
    bias_and_relu(y, &contiguous(&bias), relu)
}

fn bias_and_relu(y: FlexTensor, bias: &[f32], relu: bool) -> FlexTensor {
    let [_, channels, h, w] = dims4(&y);
    let plane = h * w;
    let mut y = writable(y);
    y.storage_mut::<f32>()
        .par_chunks_mut(plane)
        .enumerate()
        .with_min_len((CHUNK / plane.max(1)).max(1))
        .for_each(|(i, plane)| {
            let b = bias[i % channels];
            for v in plane {
                *v += b;
                // Written so that NaN stays NaN, as burn's and PyTorch's ReLU keep it.
                if relu && *v < 0.0 {
                    *v = 0.0;
                }
            }
        });
    y
}

/// `t` as a tensor whose storage is exactly its values in order, owned by it alone, so that
/// it can be written in place (a copy only when it is a view or shared).
fn writable(t: FlexTensor) -> FlexTensor {
    let exact = t.is_contiguous()
        && t.layout().start_offset() == 0
        && t.storage::<f32>().len() == t.shape().num_elements();
    if exact { t } else { t.to_contiguous() }
}

impl UnfoldedConv for Flex {
    fn unfolded_conv(
        x: FlexTensor,
        weight: FlexTensor,
        bias: FlexTensor,
        stride: usize,
        padding: usize,
        relu: bool,
    ) -> FlexTensor {
        forward(Kind::Conv, x, weight, bias, stride, padding, relu)
    }

    fn unfolded_conv_transpose(
        x: FlexTensor,
        weight: FlexTensor,
        bias: FlexTensor,
        stride: usize,
        padding: usize,
        relu: bool,
    ) -> FlexTensor {
        forward(Kind::Transpose, x, weight, bias, stride, padding, relu)
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
struct LayerBackward;

/// What backward needs: the inputs' checkpoint ids, the output when a ReLU was applied
/// (its sign is the ReLU's gradient mask), stride, padding and the kind.
#[derive(Debug, Clone)]
struct State {
    x: NodeId,
    weight: NodeId,
    relu_output: Option<FlexTensor>,
    stride: usize,
    padding: usize,
    kind: Kind,
}

impl Backward<Flex, 3> for LayerBackward {
    type State = State;

    fn backward(self, ops: Ops<State, 3>, grads: &mut Gradients, checkpointer: &mut Checkpointer) {
        let [node_x, node_weight, node_bias] = ops.parents;
        let dy = grads.consume::<Flex>(&ops.node);
        let state = ops.state;
        let x: FlexTensor = checkpointer.retrieve_node_output(state.x);
        let weight: FlexTensor = checkpointer.retrieve_node_output(state.weight);
        let [_, out_channels, oh, ow] = dims4(&dy);
        let plane = oh * ow;
        let mut dy = writable(dy);
        // The ReLU's gradient (zero where the output was not positive) and each plane's
        // sum for the bias, in one parallel pass.
        let relu_output = state.relu_output.as_ref().map(contiguous);
        let mut sums = vec![0.0f32; dy.shape().num_elements() / plane.max(1)];
        dy.storage_mut::<f32>()
            .par_chunks_mut(plane)
            .zip(sums.par_iter_mut())
            .enumerate()
            .with_min_len((CHUNK / plane.max(1)).max(1))
            .for_each(|(i, (grads, sum))| {
                if let Some(y) = &relu_output {
                    for (g, &y) in grads.iter_mut().zip(&y[i * plane..(i + 1) * plane]) {
                        if y <= 0.0 {
                            *g = 0.0;
                        }
                    }
                }
                *sum = grads.iter().sum();
            });
        if let Some(node) = node_bias {
            let mut db = vec![0.0f32; out_channels];
            for (i, s) in sums.iter().enumerate() {
                db[i % out_channels] += s;
            }
            grads.register::<Flex>(node.id, tensor(db, Shape::new([out_channels])));
        }
        let [_, cin, height, width] = dims4(&x);
        let [w0, w1, kernel, _] = dims4(&weight);
        let wanted = Wanted {
            input: node_x.is_some(),
            weight: node_weight.is_some(),
        };
        let (x_values, w_values, dy) = (contiguous(&x), contiguous(&weight), contiguous(&dy));
        // The large side is a convolution's input and a transpose convolution's output.
        let (large, small, large_channels) = match state.kind {
            Kind::Conv => ([height, width], [oh, ow], cin),
            Kind::Transpose => ([oh, ow], [height, width], w1),
        };
        let window = Window {
            channels: large_channels,
            large,
            small,
            kernel,
            stride: state.stride,
            padding: state.padding,
        };
        let (dx, dw) = match state.kind {
            Kind::Conv => unfold::conv_backward(window, &x_values, &w_values, &dy, w0, wanted),
            Kind::Transpose => {
                unfold::conv_transpose_backward(window, &x_values, &w_values, &dy, cin, wanted)
            }
        };
        if let (Some(node), Some(dx)) = (node_x, dx) {
            grads.register::<Flex>(node.id, tensor(dx, x.shape()));
        }
        if let (Some(node), Some(dw)) = (node_weight, dw) {
            grads.register::<Flex>(node.id, tensor(dw, weight.shape()));
        }
    }
}

/// The autodiff side of both layers.
#[allow(clippy::too_many_arguments)]
fn tracked<C: CheckpointStrategy>(
    kind: Kind,
    x: FloatTensor<Autodiff<Flex, C>>,
    weight: FloatTensor<Autodiff<Flex, C>>,
    bias: FloatTensor<Autodiff<Flex, C>>,
    stride: usize,
    padding: usize,
    relu: bool,
) -> FloatTensor<Autodiff<Flex, C>> {
    match LayerBackward
        .prepare::<C>([x.node(), weight.node(), bias.node()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(mut prep) => {
            let (x_id, weight_id) = (prep.checkpoint(&x), prep.checkpoint(&weight));
            let y = forward(
                kind,
                x.into_primitive(),
                weight.into_primitive(),
                bias.into_primitive(),
                stride,
                padding,
                relu,
            );
            let state = State {
                x: x_id,
                weight: weight_id,
                // Shares the output's buffer; the next layer keeps it alive anyway.
                relu_output: relu.then(|| y.clone()),
                stride,
                padding,
                kind,
            };
            prep.finish(state, y)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(
            kind,
            x.into_primitive(),
            weight.into_primitive(),
            bias.into_primitive(),
            stride,
            padding,
            relu,
        )),
    }
}

impl<C: CheckpointStrategy> UnfoldedConv for Autodiff<Flex, C> {
    fn unfolded_conv(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        stride: usize,
        padding: usize,
        relu: bool,
    ) -> FloatTensor<Self> {
        tracked::<C>(Kind::Conv, x, weight, bias, stride, padding, relu)
    }

    fn unfolded_conv_transpose(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        stride: usize,
        padding: usize,
        relu: bool,
    ) -> FloatTensor<Self> {
        tracked::<C>(Kind::Transpose, x, weight, bias, stride, padding, relu)
    }
}

/// Whether `device` runs these kernels (flex, with or without autodiff, f32).
pub fn runs_on(device: &burn::tensor::Device) -> bool {
    *device == burn::tensor::Device::flex()
}

/// `relu(conv(x, weight) + bias)` (or without the ReLU) through [`UnfoldedConv`]; all on
/// flex, f32.
pub fn conv(
    x: Tensor<4>,
    weight: Tensor<4>,
    bias: Tensor<1>,
    stride: usize,
    padding: usize,
    relu: bool,
) -> Tensor<4> {
    debug_assert_eq!(x.dtype(), DType::F32);
    Tensor::from_dispatch(burn::backend::Dispatch::unfolded_conv(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        stride,
        padding,
        relu,
    ))
}

/// The same for a transpose convolution.
pub fn conv_transpose(
    x: Tensor<4>,
    weight: Tensor<4>,
    bias: Tensor<1>,
    stride: usize,
    padding: usize,
    relu: bool,
) -> Tensor<4> {
    Tensor::from_dispatch(burn::backend::Dispatch::unfolded_conv_transpose(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        stride,
        padding,
        relu,
    ))
}
