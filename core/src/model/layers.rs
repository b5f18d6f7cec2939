//! Layers as the built-in models compute them: a convolution or transpose convolution with
//! its ReLU, in f32 or a half precision, in the fastest form the device has (CPU matrix
//! products and gradient kernels on flex, output-only layers on cubecl devices) or in burn's
//! own form, the reference the others are tested against.

use burn::nn::conv::{Conv2d, ConvTranspose2d};
use burn::nn::{GroupNorm, PaddingConfig2d};
use burn::tensor::module::{conv_transpose2d, conv2d};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use burn::tensor::{FloatDType, Tensor};
use serde::{Deserialize, Serialize};

use super::cpu_forms;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
use super::gpu_layers;

/// How the convolutions are computed. Both give the same function and gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerForms {
    /// On CPU backends, the first and last layers as matrix products ([`cpu_forms`]) and,
    /// on flex, the others with the gradient kernels of `cpu_kernels`; elsewhere burn's
    /// convolutions (and in f16/bf16 everywhere on the CPU). On cubecl devices (wgpu, CUDA)
    /// each layer with its ReLU as one op that keeps only its output (`gpu_layers`, in any
    /// precision), and on wgpu the quantizer's nearest-code kernel ([`nearest_code`]).
    #[default]
    Auto,
    /// burn's convolutions and the tensor-code quantizer everywhere: the reference the
    /// faster forms are tested against.
    Plain,
}

/// A convolution computed in `compute` precision: its weights are cast where they are used,
/// so the parameters (and the optimizer's view of them) stay f32 and receive f32 gradients
/// through the cast, as mixed precision keeps master weights.
///
/// With `relu`, the ReLU after the layer: part of the layer's call where a CPU form fuses it.
pub fn conv(
    layer: &Conv2d,
    x: Tensor<4>,
    compute: Option<FloatDType>,
    forms: LayerForms,
    relu: bool,
) -> Tensor<4> {
    if compute.is_none() && forms == LayerForms::Auto && cpu_forms::is_cpu(&x.device()) {
        return cpu_forms::conv(layer, x, relu);
    }
    let weight = cast_to(layer.weight.val(), compute);
    let bias = layer.bias.as_ref().map(|b| cast_to(b.val(), compute));
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    if let (LayerForms::Auto, Some(bias)) = (forms, &bias)
        && gpu_layers::runs_on(&x.device())
    {
        return gpu_layers::conv(x, weight, bias.clone(), conv_options(layer), relu);
    }
    let y = match compute {
        None => layer.forward(x),
        Some(_) => conv2d(x, weight, bias, conv_options(layer)),
    };
    relu_if(y, relu)
}

/// `t` in `compute` precision, or as stored.
pub(crate) fn cast_to<const D: usize>(t: Tensor<D>, compute: Option<FloatDType>) -> Tensor<D> {
    match compute {
        Some(dt) => t.cast(dt),
        None => t,
    }
}

pub(crate) fn conv_options(layer: &Conv2d) -> ConvOptions<2> {
    // The model builds every convolution with explicit padding (burn keeps its resolver for
    // `Same` private); `Valid` is no padding.
    let padding = match layer.padding {
        PaddingConfig2d::Explicit(top, left, bottom, right) => [(top, bottom), (left, right)],
        _ => [(0, 0), (0, 0)],
    };
    ConvOptions::new_with_padding(layer.stride, padding, layer.dilation, layer.groups)
}

fn conv_transpose_options(layer: &ConvTranspose2d) -> ConvTransposeOptions<2> {
    ConvTransposeOptions::new(
        layer.stride,
        layer.padding,
        layer.padding_out,
        layer.dilation,
        layer.groups,
    )
}

pub fn up(
    layer: &ConvTranspose2d,
    x: Tensor<4>,
    compute: Option<FloatDType>,
    forms: LayerForms,
    relu: bool,
) -> Tensor<4> {
    if compute.is_none() && forms == LayerForms::Auto && cpu_forms::is_cpu(&x.device()) {
        return cpu_forms::up(layer, x, relu);
    }
    let weight = cast_to(layer.weight.val(), compute);
    let bias = layer.bias.as_ref().map(|b| cast_to(b.val(), compute));
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    if let (LayerForms::Auto, Some(bias)) = (forms, &bias)
        && gpu_layers::runs_on(&x.device())
    {
        let options = conv_transpose_options(layer);
        return gpu_layers::conv_transpose(x, weight, bias.clone(), options, relu);
    }
    let y = match compute {
        None => layer.forward(x),
        Some(_) => conv_transpose2d(x, weight, bias, conv_transpose_options(layer)),
    };
    relu_if(y, relu)
}

/// `norm` over `x`, then a ReLU: on flex in f32 one host op (`cpu_kernels::group_norm`,
/// where burn records nine passes each keeping its input); elsewhere burn's.
pub fn group_norm_relu(norm: &GroupNorm, x: Tensor<4>) -> Tensor<4> {
    #[cfg(feature = "flex")]
    if let (true, Some(gamma), Some(beta)) = (super::cpu_kernels::take(&x), &norm.gamma, &norm.beta)
    {
        return super::cpu_kernels::group_norm::normalise(
            x,
            gamma.val(),
            beta.val(),
            norm.num_groups,
            norm.epsilon,
            true,
        );
    }
    burn::tensor::activation::relu(norm.forward(x))
}

/// `relu(y)` when `relu`, else `y`.
pub fn relu_if(y: Tensor<4>, relu: bool) -> Tensor<4> {
    if relu {
        burn::tensor::activation::relu(y)
    } else {
        y
    }
}

pub(crate) fn to_f32(x: Tensor<4>, compute: Option<FloatDType>) -> Tensor<4> {
    match compute {
        Some(_) => x.cast(FloatDType::F32),
        None => x,
    }
}
