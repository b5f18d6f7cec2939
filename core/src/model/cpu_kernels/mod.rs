//! The model's convolutions on flex with their gradients computed by [`unfold`]'s kernels
//! (or, for one input or one output channel, [`thin`]'s filters over planes), wired in
//! through burn's backend-extension mechanism.
//!
//! Forward is ours too, one sample per rayon task: a convolution unfolds the sample and
//! multiplies it by the weight ([`unfold::conv_forward`]; flex's own was a direct loop, 7%
//! of the contrastive model's cached step), a transpose convolution is one convolution per
//! output phase where its stride divides its kernel, else it multiplies and folds
//! ([`unfold::conv_transpose_forward`]; flex's scatters each product one element at a time),
//! and the bias and the activation that follows most layers (ReLU, or a GAN
//! discriminator's leaky ReLU) are applied to the sample's output in the same task; the
//! separate bias and activation passes (forward and backward) of the plain path go.
//! Backward is ours:
//! burn's default computes a weight gradient as a convolution with batch and channels
//! swapped, GEMMs of 9-16 rows (gemm's narrow `x1x6` micro-kernel was 14% of a step's
//! samples); weight gradients took about 40% of a CPU training step
//! (docs/BENCHMARKS-HISTORY.md).
//! The autodiff side, one op per layer keeping only its output, is shared with the GPU
//! layers (`model::output_only`). Only flex implements this extension: other devices keep
//! burn's convolutions or their own forms (see `model::conv`).

pub mod attention;
pub mod batch_norm;
pub mod ctc;
pub mod depthwise;
mod exp;
pub mod group_norm;
mod lanes;
pub mod layer_norm;
pub mod linear;
mod matrix;
mod per_thread;
mod plane;
pub mod relu6;
pub mod thin;
pub mod unfold;
mod unwritten;

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Flex, TensorMetadata, backend_extension};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use burn::tensor::{DType, Shape, Tensor, TensorData};

pub use super::output_only::Activation;
use super::output_only::{Layer, LayerGradients, LayerKernels, WantedGradients, tracked};
use plane::Plane;
use rayon::prelude::*;
use unfold::{Wanted, Window};
use unwritten::Unwritten;

/// A layer's convolution (or transpose convolution) with its bias and the activation after
/// it; backward through [`unfold`]'s kernels. Square kernels, equal stride and
/// padding on both axes, no dilation or groups: the default model's layers.
#[backend_extension(Flex, Autodiff)]
pub trait UnfoldedConv: burn::backend::Backend {
    fn unfolded_conv(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        stride: usize,
        padding: usize,
        activation: Activation,
    ) -> FloatTensor<Self>;

    fn unfolded_conv_transpose(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        stride: usize,
        padding: usize,
        activation: Activation,
    ) -> FloatTensor<Self>;
}

/// Elements per rayon task in the elementwise passes: large enough to amortise a task,
/// small enough to split a micro-batch's activations over the threads.
const CHUNK: usize = 1 << 14;

/// The model's layers as [`Layer`]s: square kernels, equal stride and padding on both axes.
fn conv_layer(stride: usize, padding: usize) -> Layer {
    Layer::Conv(ConvOptions::new([stride; 2], [padding; 2], [1; 2], 1))
}

fn transpose_layer(stride: usize, padding: usize) -> Layer {
    Layer::Transpose(ConvTransposeOptions::new(
        [stride; 2],
        [padding; 2],
        [0; 2],
        [1; 2],
        1,
    ))
}

/// `plane + bias`, then the activation, in place.
fn add_and_activate(plane: &mut [f32], bias: f32, activation: Activation) {
    match activation {
        Activation::None => plane.iter_mut().for_each(|v| *v += bias),
        // Written so that NaN stays NaN, as burn's and PyTorch's ReLU keep it.
        Activation::Relu => plane.iter_mut().for_each(|v| {
            let x = *v + bias;
            // A select, not a store only where negative: that one is a branch per element.
            *v = if x < 0.0 { 0.0 } else { x };
        }),
        Activation::Leaky(slope) => plane.iter_mut().for_each(|v| {
            let x = *v + bias;
            *v = if x < 0.0 { x * slope } else { x };
        }),
    }
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
        activation: Activation,
    ) -> FlexTensor {
        Flex::layer_forward(&conv_layer(stride, padding), x, weight, bias, activation)
    }

    fn unfolded_conv_transpose(
        x: FlexTensor,
        weight: FlexTensor,
        bias: FlexTensor,
        stride: usize,
        padding: usize,
        activation: Activation,
    ) -> FlexTensor {
        Flex::layer_forward(
            &transpose_layer(stride, padding),
            x,
            weight,
            bias,
            activation,
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

/// Registers each gradient whose input takes part in the backward (`None`: it does not).
fn register<const N: usize>(
    grads: &mut burn::backend::autodiff::grads::Gradients,
    gradients: [(Option<burn::backend::autodiff::NodeId>, FlexTensor); N],
) {
    for (node, gradient) in gradients {
        if let Some(node) = node {
            grads.register::<Flex>(node, gradient);
        }
    }
}

/// The sum of equal-length partial sums laid end to end, added in order: a gradient summed
/// per fixed run or group is the same whatever thread computed which part.
fn sum_partials(partials: &[f32], len: usize) -> Vec<f32> {
    let mut total = Unwritten::new(len);
    // In parallel over stretches of the sum, each adding the partials in order (the same
    // sums as one thread's): a decoder layer's 98,304 weights from 8 partials ran on one
    // thread while the other waited. A small sum stays on this thread, where handing it
    // to the pool would cost more than the adds.
    let stretch = if partials.len() < 4 * CHUNK {
        len
    } else {
        CHUNK
    };
    total
        .par_chunks_mut(stretch)
        .enumerate()
        .for_each(|(i, total)| {
            for part in partials.chunks(len.max(1)) {
                for (t, p) in total.iter_mut().zip(&part[i * stretch..]) {
                    *t += p;
                }
            }
        });
    total.written()
}

/// A tensor's values as f32, for comparing in tests.
#[cfg(test)]
pub(crate) fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// `ours` equals `theirs` (a reference computed another way) to float tolerance:
/// `|ours - theirs| <= 1e-4 (1 + |theirs|)`, element by element.
#[cfg(test)]
fn assert_close(ours: &[f32], theirs: &[f32], what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}");
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "{what}[{i}]: {a} against {b}"
        );
    }
}

/// `grads` (at an activation's output `y`) taken back through it: scaled by `slope` where
/// `y <= 0` (0 for ReLU). A factor chosen per value, not a branch, and `slope` by value, not
/// read through the closure's reference each time: so the loop vectorises (the branch ran a
/// value at a time, 5.8% of a flex step of the default model at 16 x 1, perf). The same
/// values: `g * 1.0` is `g`.
fn through_activation(grads: &mut [f32], y: &[f32], slope: f32) {
    for (g, &y) in grads.iter_mut().zip(y) {
        *g *= if y <= 0.0 { slope } else { 1.0 };
    }
}

fn dims4(t: &FlexTensor) -> [usize; 4] {
    let shape = t.shape();
    [shape[0], shape[1], shape[2], shape[3]]
}

impl LayerKernels for Flex {
    /// Each sample unfolded and multiplied (a convolution; filtered plane by plane where it
    /// has one input or one output channel) or multiplied and folded (a transpose
    /// convolution), its bias added and activated in the same task.
    fn layer_forward(
        layer: &Layer,
        x: FlexTensor,
        weight: FlexTensor,
        bias: FlexTensor,
        activation: Activation,
    ) -> FlexTensor {
        match layer {
            Layer::Conv(options) => {
                let [n, cin, height, width] = dims4(&x);
                let [out, _, kernel, _] = dims4(&weight);
                let (stride, padding) = (options.stride[0], options.padding[0].0);
                let side = |large: usize| (large + 2 * padding - kernel) / stride + 1;
                let window = Window {
                    channels: cin,
                    large: [height, width],
                    small: [side(height), side(width)],
                    kernel,
                    stride,
                    padding,
                };
                let bias = contiguous(&bias);
                let plane_len = window.small[0] * window.small[1];
                let finish = |sample: &mut [f32]| {
                    for (plane, &b) in sample.chunks_mut(plane_len.max(1)).zip(bias.iter()) {
                        add_and_activate(plane, b, activation);
                    }
                };
                let (x, weight) = (contiguous(&x), contiguous(&weight));
                let y = if thin::applies(cin, out) {
                    let geometry = Plane::new(window.large, kernel, stride, padding);
                    thin::conv_forward(geometry, &x, &weight, [cin, out], finish)
                } else {
                    unfold::conv_forward(window, &x, &weight, out, finish)
                };
                tensor(y, Shape::new([n, out, window.small[0], window.small[1]]))
            }
            Layer::Transpose(options) => {
                let [n, cin, height, width] = dims4(&x);
                let [_, cout, kernel, _] = dims4(&weight);
                let (stride, padding) = (options.stride[0], options.padding[0]);
                let out = |side: usize| (side - 1) * stride + kernel - 2 * padding;
                let window = Window {
                    channels: cout,
                    large: [out(height), out(width)],
                    small: [height, width],
                    kernel,
                    stride,
                    padding,
                };
                let bias = contiguous(&bias);
                let y = unfold::conv_transpose_forward(
                    window,
                    &contiguous(&x),
                    &contiguous(&weight),
                    cin,
                    |sample| {
                        let plane = window.large[0] * window.large[1];
                        for (plane, &b) in sample.chunks_mut(plane).zip(bias.iter()) {
                            add_and_activate(plane, b, activation);
                        }
                    },
                );
                tensor(y, Shape::new([n, cout, window.large[0], window.large[1]]))
            }
        }
    }

    /// The activation's mask and the bias sums in one parallel pass over `dy`, then
    /// [`unfold`]'s kernels for the input and weight gradients.
    fn layer_backward(
        layer: &Layer,
        x: FlexTensor,
        weight: FlexTensor,
        dy: FlexTensor,
        activated: Option<(FlexTensor, Activation)>,
        wanted: WantedGradients,
    ) -> LayerGradients<Self> {
        let [_, out_channels, oh, ow] = dims4(&dy);
        let plane = oh * ow;
        let mut dy = writable(dy);
        let slope = activated
            .as_ref()
            .and_then(|(_, activation)| activation.negative_slope())
            .unwrap_or(1.0);
        let output = activated.as_ref().map(|(y, _)| contiguous(y));
        let mut sums = vec![0.0f32; dy.shape().num_elements() / plane.max(1)];
        dy.storage_mut::<f32>()
            .par_chunks_mut(plane)
            .zip(sums.par_iter_mut())
            .enumerate()
            .with_min_len((CHUNK / plane.max(1)).max(1))
            .for_each(|(i, (grads, sum))| {
                if let Some(y) = &output {
                    through_activation(grads, &y[i * plane..(i + 1) * plane], slope);
                }
                *sum = lanes::sum(grads);
            });
        let db = wanted.bias.then(|| {
            let mut db = vec![0.0f32; out_channels];
            for (i, s) in sums.iter().enumerate() {
                db[i % out_channels] += s;
            }
            tensor(db, Shape::new([out_channels]))
        });
        let [_, cin, height, width] = dims4(&x);
        let [w0, w1, kernel, _] = dims4(&weight);
        let (stride, padding) = match layer {
            Layer::Conv(o) => (o.stride[0], o.padding[0].0),
            Layer::Transpose(o) => (o.stride[0], o.padding[0]),
        };
        let unfold_wanted = Wanted {
            input: wanted.input,
            weight: wanted.weight,
        };
        let (x_values, w_values, dy) = (contiguous(&x), contiguous(&weight), contiguous(&dy));
        // The large side is a convolution's input and a transpose convolution's output.
        let (large, small, large_channels) = match layer {
            Layer::Conv(_) => ([height, width], [oh, ow], cin),
            Layer::Transpose(_) => ([oh, ow], [height, width], w1),
        };
        let window = Window {
            channels: large_channels,
            large,
            small,
            kernel,
            stride,
            padding,
        };
        let (dx, dw) = match layer {
            Layer::Conv(_) if thin::applies(cin, w0) => thin::conv_backward(
                Plane::new(large, kernel, stride, padding),
                &x_values,
                &w_values,
                &dy,
                [cin, w0],
                [wanted.input, wanted.weight],
            ),
            Layer::Conv(_) => {
                unfold::conv_backward(window, &x_values, &w_values, &dy, w0, unfold_wanted)
            }
            Layer::Transpose(_) => unfold::conv_transpose_backward(
                window,
                &x_values,
                &w_values,
                &dy,
                cin,
                unfold_wanted,
            ),
        };
        [
            dx.map(|dx| tensor(dx, x.shape())),
            dw.map(|dw| tensor(dw, weight.shape())),
            db,
        ]
    }
}

impl<C: CheckpointStrategy> UnfoldedConv for Autodiff<Flex, C> {
    fn unfolded_conv(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        stride: usize,
        padding: usize,
        activation: Activation,
    ) -> FloatTensor<Self> {
        tracked::<Flex, C>(conv_layer(stride, padding), x, weight, bias, activation)
    }

    fn unfolded_conv_transpose(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        stride: usize,
        padding: usize,
        activation: Activation,
    ) -> FloatTensor<Self> {
        tracked::<Flex, C>(
            transpose_layer(stride, padding),
            x,
            weight,
            bias,
            activation,
        )
    }
}

/// Whether `device` runs these kernels (flex, with or without autodiff, f32).
pub fn runs_on(device: &burn::tensor::Device) -> bool {
    *device == burn::tensor::Device::flex()
}

/// Whether these kernels take `x`: an f32 tensor on flex.
pub fn take<const D: usize>(x: &Tensor<D>) -> bool {
    x.dtype() == DType::F32 && runs_on(&x.device())
}

/// `activation(conv(x, weight) + bias)` through [`UnfoldedConv`]; all on flex, f32.
pub fn conv(
    x: Tensor<4>,
    weight: Tensor<4>,
    bias: Tensor<1>,
    stride: usize,
    padding: usize,
    activation: Activation,
) -> Tensor<4> {
    debug_assert_eq!(x.dtype(), DType::F32);
    Tensor::from_dispatch(burn::backend::Dispatch::unfolded_conv(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        stride,
        padding,
        activation,
    ))
}

/// The same for a transpose convolution.
pub fn conv_transpose(
    x: Tensor<4>,
    weight: Tensor<4>,
    bias: Tensor<1>,
    stride: usize,
    padding: usize,
    activation: Activation,
) -> Tensor<4> {
    Tensor::from_dispatch(burn::backend::Dispatch::unfolded_conv_transpose(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        stride,
        padding,
        activation,
    ))
}
