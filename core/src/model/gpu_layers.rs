//! The model's layers on cubecl devices (wgpu; the CUDA build too, untested here): each
//! layer with its ReLU as one autodiff op that keeps only its output ([`super::output_only`]).
//!
//! On wgpu that halves what a training step holds for backward (`docs/BENCHMARKS.md`,
//! "Memory of a step on wgpu"). Each layer, forward with its bias and ReLU and both its
//! gradients, runs as matrix products over unfolded windows (`headroom_shaders::conv_gemm`,
//! a bounded chunk of samples at a time) where burn's direct kernels ran convolutions (the
//! weight gradient with the batch as channels); a grouped layer, one with fewer than
//! `conv_gemm::MIN_CHANNELS` channels on a side, and one in half precision keep burn's
//! kernels.

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::ops::{ActivationOps, FloatTensorOps, ModuleOps};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Cube, TensorMetadata, backend_extension};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use burn::tensor::{Device, Tensor};
use headroom_shaders::conv_gemm;

use products::ProductKernels;

use super::output_only::{
    Activation, Layer, LayerGradients, LayerKernels, WantedGradients, tracked,
};

mod products;

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

    /// `conv2d(x, weight) + bias`, then a leaky ReLU of `slope` (positive) below zero.
    fn conv_leaky_keeping_output(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<2>,
        slope: f32,
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

impl LayerKernels for Cube {
    fn layer_forward(
        layer: &Layer,
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        activation: Activation,
    ) -> FloatTensor<Self> {
        if by_products(layer, &x, &weight) {
            // The ReLU in the same pass; a leaky one after it.
            let relu = activation == Activation::Relu;
            let y = match layer {
                Layer::Conv(options) => Cube::products_conv(x, weight, bias, options.clone(), relu),
                Layer::Transpose(options) => {
                    Cube::products_conv_transpose(x, weight, bias, options.clone(), relu)
                }
            };
            return match activation {
                Activation::Leaky(slope) => Cube::leaky_relu(y, slope.into()),
                _ => y,
            };
        }
        let y = match layer {
            Layer::Conv(options) => Cube::conv2d(x, weight, Some(bias), options.clone()),
            Layer::Transpose(options) => {
                Cube::conv_transpose2d(x, weight, Some(bias), options.clone())
            }
        };
        match activation {
            Activation::None => y,
            Activation::Relu => Cube::relu(y),
            Activation::Leaky(slope) => Cube::leaky_relu(y, slope.into()),
        }
    }

    fn layer_backward(
        layer: &Layer,
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        activated: Option<(FloatTensor<Self>, Activation)>,
        wanted: WantedGradients,
    ) -> LayerGradients<Self> {
        let dy = match activated {
            // slope * dy below zero, dy above: slope * dy + (1 - slope) * relu's gradient.
            Some((y, Activation::Leaky(slope))) => {
                let above = Cube::relu_backward(y, dy.clone());
                Cube::float_add(
                    Cube::float_mul_scalar(dy, slope.into()),
                    Cube::float_mul_scalar(above, (1.0 - slope).into()),
                )
            }
            Some((y, _)) => Cube::relu_backward(y, dy),
            None => dy,
        };
        // Both layers' bias gradient: the output gradient summed over batch and space.
        let db = wanted.bias.then(|| {
            let channels = dy.shape()[1];
            let db = Cube::float_sum_dim(dy.clone(), 0);
            let db = Cube::float_sum_dim(Cube::float_sum_dim(db, 2), 3);
            Cube::float_reshape(db, [channels].into())
        });
        let products = by_products(layer, &x, &weight);
        let (dx, dw) = match layer {
            Layer::Conv(options) if products => {
                let options = options.clone();
                match (wanted.input, wanted.weight) {
                    (true, true) => {
                        let (dx, dw) = Cube::products_conv_gradients(x, weight, dy, options);
                        (Some(dx), Some(dw))
                    }
                    (true, false) => (
                        Some(Cube::products_conv_input_gradient(x, weight, dy, options)),
                        None,
                    ),
                    (false, true) => (
                        None,
                        Some(Cube::products_conv_weight_gradient(x, weight, dy, options)),
                    ),
                    (false, false) => (None, None),
                }
            }
            Layer::Transpose(options) if products => {
                let options = options.clone();
                match (wanted.input, wanted.weight) {
                    (true, true) => {
                        let (dx, dw) =
                            Cube::products_conv_transpose_gradients(x, weight, dy, options);
                        (Some(dx), Some(dw))
                    }
                    (true, false) => (
                        Some(Cube::products_conv_transpose_input_gradient(
                            x, weight, dy, options,
                        )),
                        None,
                    ),
                    (false, true) => (
                        None,
                        Some(Cube::products_conv_transpose_weight_gradient(
                            x, weight, dy, options,
                        )),
                    ),
                    (false, false) => (None, None),
                }
            }
            Layer::Conv(options) => (
                wanted.input.then(|| {
                    Cube::conv2d_x_backward(x.clone(), weight.clone(), dy.clone(), options.clone())
                }),
                wanted.weight.then(|| {
                    Cube::conv2d_weight_backward(x, weight.clone(), dy.clone(), options.clone())
                }),
            ),
            Layer::Transpose(options) => (
                wanted.input.then(|| {
                    Cube::conv_transpose2d_x_backward(weight.clone(), dy.clone(), options.clone())
                }),
                wanted.weight.then(|| {
                    Cube::conv_transpose2d_weight_backward(x, weight, dy, options.clone())
                }),
            ),
        };
        [dx, dw, db]
    }
}

/// Whether `layer` runs as matrix products (`conv_gemm::suits`; its channels in and out are
/// the input's and, per group, the weight's other axis), in f32 only: in f16 cubek's
/// products as launched here lose the gradients' precision (the default model's first
/// weight gradient 3% off burn's on lavapipe, 2026-12-07), so half precision keeps burn's
/// kernels until the products accumulate in f32.
fn by_products(layer: &Layer, x: &FloatTensor<Cube>, weight: &FloatTensor<Cube>) -> bool {
    if x.dtype() != burn::tensor::DType::F32 || weight.dtype() != burn::tensor::DType::F32 {
        return false;
    }
    let channels_in = x.shape()[1];
    let (groups, channels_out) = match layer {
        Layer::Conv(options) => (options.groups, weight.shape()[0]),
        Layer::Transpose(options) => (options.groups, weight.shape()[1] * options.groups),
    };
    conv_gemm::suits(groups, channels_in, channels_out)
}

impl OutputOnlyLayers for Cube {
    fn conv_keeping_output(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self> {
        Cube::layer_forward(
            &Layer::Conv(options),
            x,
            weight,
            bias,
            Activation::relu_if(relu),
        )
    }

    fn conv_leaky_keeping_output(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<2>,
        slope: f32,
    ) -> FloatTensor<Self> {
        Cube::layer_forward(
            &Layer::Conv(options),
            x,
            weight,
            bias,
            Activation::Leaky(slope),
        )
    }

    fn conv_transpose_keeping_output(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self> {
        Cube::layer_forward(
            &Layer::Transpose(options),
            x,
            weight,
            bias,
            Activation::relu_if(relu),
        )
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
        tracked::<Cube, C>(
            Layer::Conv(options),
            x,
            weight,
            bias,
            Activation::relu_if(relu),
        )
    }

    fn conv_leaky_keeping_output(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<2>,
        slope: f32,
    ) -> FloatTensor<Self> {
        tracked::<Cube, C>(
            Layer::Conv(options),
            x,
            weight,
            bias,
            Activation::Leaky(slope),
        )
    }

    fn conv_transpose_keeping_output(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self> {
        tracked::<Cube, C>(
            Layer::Transpose(options),
            x,
            weight,
            bias,
            Activation::relu_if(relu),
        )
    }
}

/// Whether `device` is a cubecl device (these layers run there).
pub fn runs_on(device: &Device) -> bool {
    use burn::backend::DispatchDevice;
    matches!(
        device.clone().without_autodiff().as_dispatch(),
        DispatchDevice::Cube(_)
    )
}

/// `relu(conv2d(x, weight) + bias)` (or without the ReLU) on a cubecl device, in the
/// precision of its inputs (mixed precision casts the weights before).
pub fn conv(
    x: Tensor<4>,
    weight: Tensor<4>,
    bias: Tensor<1>,
    options: ConvOptions<2>,
    relu: bool,
) -> Tensor<4> {
    Tensor::from_dispatch(burn::backend::Dispatch::conv_keeping_output(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        options,
        relu,
    ))
}

/// `leaky_relu(conv2d(x, weight) + bias, slope)` on a cubecl device (the GAN's
/// discriminator).
pub fn conv_leaky(
    x: Tensor<4>,
    weight: Tensor<4>,
    bias: Tensor<1>,
    options: ConvOptions<2>,
    slope: f32,
) -> Tensor<4> {
    Tensor::from_dispatch(burn::backend::Dispatch::conv_leaky_keeping_output(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
        options,
        slope,
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

#[cfg(all(test, feature = "wgpu"))]
mod tests;
