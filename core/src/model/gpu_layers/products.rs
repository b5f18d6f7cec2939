//! The layers' matrix-product kernels (`headroom_shaders::conv_gemm`) as a backend extension
//! of burn's cubecl backend, so that they run on it fused or not: with burn's `fusion` on,
//! each call is queued in the fusion stream as one opaque operation (its output's shape said
//! up front), and the element-wise chains around it fuse.
//!
//! Each gradient has its own method, as an output a call may or may not make cannot be said
//! up front; the one computing both shares the unfolded columns between them.

use burn::backend::backend_extension;
#[cfg(feature = "fusion")]
use burn::backend::fusion::custom::TensorSpec;
use burn::backend::tensor::FloatTensor;
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use headroom_shaders::CubeBackend;
use headroom_shaders::conv_gemm::{self, Wanted};

#[backend_extension(Cube, Fusion: cfg(feature = "fusion"))]
pub trait ProductKernels: burn::backend::Backend {
    /// `conv2d(x, weight) + bias`, then the ReLU when `relu`.
    #[fusion(meta = conv_spec)]
    fn products_conv(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self>;

    /// `conv_transpose2d(x, weight) + bias`, then the ReLU when `relu`.
    #[fusion(meta = conv_transpose_spec)]
    fn products_conv_transpose(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self>;

    /// The gradient of `conv2d(x, weight)`'s input from its output's gradient `dy`.
    #[fusion(dtype = x, shape = x)]
    fn products_conv_input_gradient(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self>;

    /// The gradient of `conv2d(x, weight)`'s weight.
    #[fusion(dtype = weight, shape = weight)]
    fn products_conv_weight_gradient(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self>;

    /// Both gradients of `conv2d(x, weight)`: input, weight.
    #[fusion(meta = both_specs)]
    fn products_conv_gradients(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// The gradient of `conv_transpose2d(x, weight)`'s input.
    #[fusion(dtype = x, shape = x)]
    fn products_conv_transpose_input_gradient(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self>;

    /// The gradient of `conv_transpose2d(x, weight)`'s weight.
    #[fusion(dtype = weight, shape = weight)]
    fn products_conv_transpose_weight_gradient(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self>;

    /// Both gradients of `conv_transpose2d(x, weight)`: input, weight.
    #[fusion(meta = both_transpose_specs)]
    fn products_conv_transpose_gradients(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
}

#[cfg(feature = "fusion")]
fn conv_spec(
    x: &TensorSpec,
    weight: &TensorSpec,
    _bias: &TensorSpec,
    options: &ConvOptions<2>,
    _relu: &bool,
) -> TensorSpec {
    TensorSpec::new(
        conv_gemm::conv2d_shape(&x.shape, &weight.shape, options),
        x.dtype,
    )
}

#[cfg(feature = "fusion")]
fn conv_transpose_spec(
    x: &TensorSpec,
    weight: &TensorSpec,
    _bias: &TensorSpec,
    options: &ConvTransposeOptions<2>,
    _relu: &bool,
) -> TensorSpec {
    TensorSpec::new(
        conv_gemm::conv_transpose2d_shape(&x.shape, &weight.shape, options),
        x.dtype,
    )
}

#[cfg(feature = "fusion")]
fn both_specs(
    x: &TensorSpec,
    weight: &TensorSpec,
    _dy: &TensorSpec,
    _options: &ConvOptions<2>,
) -> (TensorSpec, TensorSpec) {
    (x.clone(), weight.clone())
}

#[cfg(feature = "fusion")]
fn both_transpose_specs(
    x: &TensorSpec,
    weight: &TensorSpec,
    _dy: &TensorSpec,
    _options: &ConvTransposeOptions<2>,
) -> (TensorSpec, TensorSpec) {
    (x.clone(), weight.clone())
}

const INPUT: Wanted = Wanted {
    input: true,
    weight: false,
};
const WEIGHT: Wanted = Wanted {
    input: false,
    weight: true,
};
const BOTH: Wanted = Wanted {
    input: true,
    weight: true,
};

/// A gradient `wanted` asked for, which `conv_gemm` always makes when asked.
fn made(gradient: Option<FloatTensor<CubeBackend>>) -> FloatTensor<CubeBackend> {
    gradient.expect("conv_gemm makes every gradient it is asked for")
}

impl ProductKernels for CubeBackend {
    fn products_conv(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self> {
        conv_gemm::conv2d(x, weight, Some(bias), &options, relu)
    }

    fn products_conv_transpose(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
        relu: bool,
    ) -> FloatTensor<Self> {
        conv_gemm::conv_transpose2d(x, weight, Some(bias), &options, relu)
    }

    fn products_conv_input_gradient(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        made(conv_gemm::conv2d_gradients(x, weight, dy, &options, INPUT).input)
    }

    fn products_conv_weight_gradient(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        made(conv_gemm::conv2d_gradients(x, weight, dy, &options, WEIGHT).weight)
    }

    fn products_conv_gradients(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let g = conv_gemm::conv2d_gradients(x, weight, dy, &options, BOTH);
        (made(g.input), made(g.weight))
    }

    fn products_conv_transpose_input_gradient(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self> {
        made(conv_gemm::conv_transpose2d_gradients(x, weight, dy, &options, INPUT).input)
    }

    fn products_conv_transpose_weight_gradient(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self> {
        made(conv_gemm::conv_transpose2d_gradients(x, weight, dy, &options, WEIGHT).weight)
    }

    fn products_conv_transpose_gradients(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        options: ConvTransposeOptions<2>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let g = conv_gemm::conv_transpose2d_gradients(x, weight, dy, &options, BOTH);
        (made(g.input), made(g.weight))
    }
}
