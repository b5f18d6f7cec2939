//! A 2-D convolution and a transposed convolution, forward and both gradients, as matrix
//! products on any cubecl runtime, a bounded chunk of samples at a time.
//!
//! burn 0.22.1 without its `autotune` feature computes both gradients with its direct
//! convolution kernel: the weight gradient as a convolution of the input by the output's
//! gradient, with the batch as channels and a whole feature map as the kernel, the shape
//! that kernel runs worst (92% of a 64 x 16 step's backward on an H200, docs/BENCHMARKS.md).
//! Here the window's values are unfolded into columns ([`unfold`]) and each gradient is one
//! product by cubek's matmul (the tiles of the adapter: cooperative matrices where the
//! compiler has them), the input's folded back ([`fold`]). The columns of a chunk are
//! bounded by [`chunk_bytes`] ([`CHUNK_BYTES`] unless set) and by the layer's largest
//! activation, so they add a buffer no larger than one the step already holds; the planner
//! measures it in its calibration steps like any other buffer.
//!
//! For a transposed convolution the roles swap: its output gradient is the image that is
//! unfolded (the transpose of a convolution from output to input), the weight gradient is
//! the input times those columns, and the input gradient is the weight times them. Its
//! forward is the weight times the input, folded onto the output with the bias and ReLU
//! ([`conv_transpose2d`]); burn's direct kernel took a third of the default model's step on
//! lavapipe there. A convolution's forward is the weight times the columns, laid out as
//! planes with the bias and ReLU ([`planes`], [`conv2d`]).
//!
//! Where a layer has few channels on either side ([`suits`]) the products degenerate (a
//! matrix times a vector, an outer product) and burn's direct kernels stay faster.

mod planes;
mod unfold;

use std::sync::atomic::{AtomicUsize, Ordering};

use burn_backend::ops::conv::{
    calculate_conv_output_size_asymmetric, calculate_conv_transpose_output_size,
};
use burn_backend::ops::{ConvOptions, ConvTransposeOptions, FloatTensorOps};
use burn_backend::{Shape, Slice, TensorMetadata};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;

pub use planes::planes;
pub use unfold::{Epilogue, fold, unfold};

type B = CubeBackend;

/// Most bytes of unfolded columns one chunk holds, whatever the layer (a layer's own bound
/// is lower where its activations are smaller: `bound`): the samples of a micro-batch are
/// taken as many at a time as fit (at least one). Under lavapipe's 128 MiB largest binding.
pub const CHUNK_BYTES: usize = 64 << 20;

static CHUNK: AtomicUsize = AtomicUsize::new(CHUNK_BYTES);

/// The bound on a chunk's columns in force.
pub fn chunk_bytes() -> usize {
    CHUNK.load(Ordering::Relaxed)
}

/// Sets the bound on a chunk's columns for the whole process (tests use it to split a small
/// batch into chunks); returns the bound it replaces.
pub fn set_chunk_bytes(bytes: usize) -> usize {
    CHUNK.swap(bytes, Ordering::Relaxed)
}

/// A convolution's window as seen from the image it slides over: the image's channels and
/// size, the grid of window positions and the window's shape (padding before each axis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub channels: usize,
    pub image: [usize; 2],
    pub positions: [usize; 2],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
}

impl Window {
    /// The window of `conv2d` over an input of `channels` and `image`'s size: positioned at
    /// every value of its output.
    pub fn convolution(
        channels: usize,
        image: [usize; 2],
        kernel: [usize; 2],
        options: &ConvOptions<2>,
    ) -> Self {
        let positions = [0, 1].map(|axis| {
            calculate_conv_output_size_asymmetric(
                kernel[axis],
                options.stride[axis],
                options.padding[axis],
                options.dilation[axis],
                image[axis],
            )
        });
        Self {
            channels,
            image,
            positions,
            kernel,
            stride: options.stride,
            padding: options.padding_begin(),
            dilation: options.dilation,
        }
    }

    /// The window of the convolution that `conv_transpose2d` transposes: it maps the
    /// transposed convolution's output (`channels`, the image) to its input (of
    /// `positions`' size, a position per value).
    pub fn transposed(
        channels: usize,
        positions: [usize; 2],
        kernel: [usize; 2],
        options: &ConvTransposeOptions<2>,
    ) -> Self {
        let image = [0, 1].map(|axis| {
            calculate_conv_transpose_output_size(
                kernel[axis],
                options.stride[axis],
                options.padding[axis],
                options.padding_out[axis],
                options.dilation[axis],
                positions[axis],
            )
        });
        Self {
            channels,
            image,
            positions,
            kernel,
            stride: options.stride,
            padding: options.padding,
            dilation: options.dilation,
        }
    }

    /// Rows of the columns: one per (channel, kernel row, kernel column).
    pub fn rows(&self) -> usize {
        self.channels * self.kernel[0] * self.kernel[1]
    }

    /// Columns per sample: one per window position.
    pub fn positions_per_sample(&self) -> usize {
        self.positions[0] * self.positions[1]
    }

    /// Samples unfolded at once out of `samples`, for values of `elem_bytes` each and
    /// at most `bound` bytes of columns (one sample whatever it holds).
    pub fn samples_per_chunk(&self, samples: usize, elem_bytes: usize, bound: usize) -> usize {
        let per_sample = self.rows() * self.positions_per_sample() * elem_bytes;
        (bound / per_sample.max(1)).clamp(1, samples.max(1))
    }
}

/// Which gradients to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    pub input: bool,
    pub weight: bool,
}

/// The input's and the weight's gradients, where wanted.
#[derive(Debug)]
pub struct Gradients {
    pub input: Option<CubeTensor>,
    pub weight: Option<CubeTensor>,
}

/// Fewest channels on either side of a layer these forms take.
pub const MIN_CHANNELS: usize = 8;

/// Whether these forms suit a layer of `groups` with these channels: ungrouped (grouped
/// layers stay burn's; the functions below panic on one), and at least [`MIN_CHANNELS`] in
/// and out. The default model's first layer (one channel in) and last (one out) make its
/// products a matrix times a vector and an outer product: on lavapipe the last layer's
/// gradients took 248 + 119 ms by products against 15 + 44 ms by burn's direct kernels
/// (`trainer-cli bench --backend wgpu --profile`, 16 patches, 2026-12-07).
pub fn suits(groups: usize, channels_in: usize, channels_out: usize) -> bool {
    groups == 1 && channels_in >= MIN_CHANNELS && channels_out >= MIN_CHANNELS
}

/// Gradients of `conv2d(x, weight)` (`x` `[n, in, h, w]`, `weight` `[out, in, kh, kw]`) from
/// the output's gradient `dy` (`[n, out, oh, ow]`); ungrouped.
pub fn conv2d_gradients(
    x: CubeTensor,
    weight: CubeTensor,
    dy: CubeTensor,
    options: &ConvOptions<2>,
    wanted: Wanted,
) -> Gradients {
    assert_eq!(options.groups, 1, "conv_gemm: a grouped convolution");
    let [samples, channels, h, w] = dims(&x);
    let weight_shape = weight.shape();
    let [out, _, kh, kw] = dims(&weight);
    let window = Window::convolution(channels, [h, w], [kh, kw], options);
    // `[rows, out]`: the weight read as `[out, rows]`, transposed (a view).
    let weight_t = B::float_swap_dims(
        B::float_reshape(weight, Shape::from([out, window.rows()])),
        0,
        1,
    );
    let x = into_contiguous(x);
    let dx = wanted.input.then(|| output_like(&x, x.shape(), dy.dtype));
    let mut dw = None;
    let per_chunk = window.samples_per_chunk(samples, dy.dtype.size(), bound(&[&x, &dy]));
    for (first, count) in chunks(samples, per_chunk) {
        let dy_rows = sample_rows(&dy, first, count);
        if wanted.weight {
            let columns = unfold(&x, first, count, &window);
            let part = B::float_matmul(dy_rows.clone(), B::float_swap_dims(columns, 0, 1));
            dw = Some(accumulate(dw, part));
        }
        if let Some(dx) = &dx {
            let columns = B::float_matmul(weight_t.clone(), dy_rows);
            fold(&columns, dx, first, count, &window, Epilogue::default());
        }
    }
    Gradients {
        input: dx,
        weight: dw.map(|dw| B::float_reshape(dw, weight_shape)),
    }
}

/// Gradients of `conv_transpose2d(x, weight)` (`x` `[n, in, h, w]`, `weight`
/// `[in, out, kh, kw]`) from the output's gradient `dy` (`[n, out, oh, ow]`); ungrouped.
pub fn conv_transpose2d_gradients(
    x: CubeTensor,
    weight: CubeTensor,
    dy: CubeTensor,
    options: &ConvTransposeOptions<2>,
    wanted: Wanted,
) -> Gradients {
    assert_eq!(
        options.groups, 1,
        "conv_gemm: a grouped transposed convolution"
    );
    let [samples, channels, h, w] = dims(&x);
    let weight_shape = weight.shape();
    let [_, out, kh, kw] = dims(&weight);
    let window = Window::transposed(out, [h, w], [kh, kw], options);
    let weight_rows = B::float_reshape(weight, Shape::from([channels, window.rows()]));
    let dy = into_contiguous(dy);
    let dx = wanted.input.then(|| output_like(&x, x.shape(), dy.dtype));
    let mut dw = None;
    let per_chunk = window.samples_per_chunk(samples, dy.dtype.size(), bound(&[&x, &dy]));
    for (first, count) in chunks(samples, per_chunk) {
        let columns = unfold(&dy, first, count, &window);
        if wanted.weight {
            // `[rows, in]`, both sides read along their rows; transposed once at the end.
            let part = B::float_matmul(columns.clone(), sample_pixels(&x, first, count));
            dw = Some(accumulate(dw, part));
        }
        if let Some(dx) = &dx {
            let rows = B::float_matmul(weight_rows.clone(), columns);
            planes(&rows, dx, first, count, Epilogue::default());
        }
    }
    Gradients {
        input: dx,
        weight: dw.map(|dw| from_transposed(dw, weight_shape)),
    }
}

/// The shape of [`conv2d`]'s output for an input of shape `x` and a weight of `weight`'s:
/// what fusion is told before the layer runs.
pub fn conv2d_shape(x: &Shape, weight: &Shape, options: &ConvOptions<2>) -> Shape {
    let window = Window::convolution(x[1], [x[2], x[3]], [weight[2], weight[3]], options);
    Shape::from([x[0], weight[0], window.positions[0], window.positions[1]])
}

/// The shape of [`conv_transpose2d`]'s output (ungrouped: `weight` `[in, out, kh, kw]`).
pub fn conv_transpose2d_shape(
    x: &Shape,
    weight: &Shape,
    options: &ConvTransposeOptions<2>,
) -> Shape {
    let window = Window::transposed(weight[1], [x[2], x[3]], [weight[2], weight[3]], options);
    Shape::from([x[0], weight[1], window.image[0], window.image[1]])
}

/// `conv2d(x, weight) + bias` (`x` `[n, in, h, w]`, `weight` `[out, in, kh, kw]`), then the
/// ReLU when `relu`; ungrouped.
pub fn conv2d(
    x: CubeTensor,
    weight: CubeTensor,
    bias: Option<CubeTensor>,
    options: &ConvOptions<2>,
    relu: bool,
) -> CubeTensor {
    assert_eq!(options.groups, 1, "conv_gemm: a grouped convolution");
    let [samples, channels, h, w] = dims(&x);
    let [out, _, kh, kw] = dims(&weight);
    let window = Window::convolution(channels, [h, w], [kh, kw], options);
    let weight_rows = B::float_reshape(weight, Shape::from([out, window.rows()]));
    let bias = bias.map(into_contiguous);
    let x = into_contiguous(x);
    let y = output_like(
        &x,
        Shape::from([samples, out, window.positions[0], window.positions[1]]),
        x.dtype,
    );
    let epilogue = Epilogue {
        bias: bias.as_ref(),
        relu,
    };
    let per_chunk = window.samples_per_chunk(samples, x.dtype.size(), bound(&[&x, &y]));
    for (first, count) in chunks(samples, per_chunk) {
        let rows = B::float_matmul(weight_rows.clone(), unfold(&x, first, count, &window));
        planes(&rows, &y, first, count, epilogue);
    }
    y
}

/// `conv_transpose2d(x, weight) + bias` (`x` `[n, in, h, w]`, `weight` `[in, out, kh, kw]`),
/// then the ReLU when `relu`; ungrouped.
pub fn conv_transpose2d(
    x: CubeTensor,
    weight: CubeTensor,
    bias: Option<CubeTensor>,
    options: &ConvTransposeOptions<2>,
    relu: bool,
) -> CubeTensor {
    assert_eq!(
        options.groups, 1,
        "conv_gemm: a grouped transposed convolution"
    );
    let [samples, channels, h, w] = dims(&x);
    let [_, out, kh, kw] = dims(&weight);
    let window = Window::transposed(out, [h, w], [kh, kw], options);
    // `[rows, in]`: the weight read as `[in, rows]`, transposed (a view).
    let weight_t = B::float_swap_dims(
        B::float_reshape(weight, Shape::from([channels, window.rows()])),
        0,
        1,
    );
    let bias = bias.map(into_contiguous);
    let y = output_like(
        &x,
        Shape::from([samples, out, window.image[0], window.image[1]]),
        x.dtype,
    );
    let epilogue = Epilogue {
        bias: bias.as_ref(),
        relu,
    };
    let per_chunk = window.samples_per_chunk(samples, x.dtype.size(), bound(&[&x, &y]));
    for (first, count) in chunks(samples, per_chunk) {
        let columns = B::float_matmul(weight_t.clone(), sample_rows(&x, first, count));
        fold(&columns, &y, first, count, &window, epilogue);
    }
    y
}

/// A contiguous tensor on `like`'s device, as the kernels here write their outputs (value i
/// at index i; cubecl may pad a new tensor's rows otherwise).
fn output_like(like: &CubeTensor, shape: Shape, dtype: burn_backend::DType) -> CubeTensor {
    empty_device_contiguous_dtype(like.client.clone(), like.device.clone(), shape, dtype)
}

/// The bytes of columns a chunk may hold: [`chunk_bytes`], and never more than the largest
/// of the layer's activations. cubecl's pool sizes its pages by the allocations it sees,
/// so columns larger than any activation made every page larger: with a bound of 64 MiB
/// alone the default model's what-if splits at 64 and 128 MiB on lavapipe were refused by
/// the runs told to use them (8 patches measured 77 MiB). Bounded by the activations, the
/// columns add a buffer of a size the pool already holds.
fn bound(activations: &[&CubeTensor]) -> usize {
    let largest = activations
        .iter()
        .map(|t| t.shape().num_elements() * t.dtype.size())
        .max()
        .unwrap_or(0);
    chunk_bytes().min(largest)
}

/// `(first, count)` of each chunk of `per_chunk` samples out of `samples`.
fn chunks(samples: usize, per_chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..samples)
        .step_by(per_chunk.max(1))
        .map(move |first| (first, per_chunk.min(samples - first)))
}

/// One invocation per value of `values`: the cubes, their size, and the index width the
/// tensors a kernel touches need.
fn launch_shape(
    values: usize,
    tensors: &[&CubeTensor],
) -> (
    burn_cubecl::cubecl::CubeCount,
    burn_cubecl::cubecl::CubeDim,
    burn_cubecl::cubecl::prelude::AddressType,
) {
    let client = &tensors[0].client;
    let cube_dim = burn_cubecl::cubecl::CubeDim::new(client, values);
    let cube_count = burn_cubecl::cubecl::calculate_cube_count_elemwise(client, values, cube_dim);
    (cube_count, cube_dim, crate::address_type(tensors))
}

fn dims(tensor: &CubeTensor) -> [usize; 4] {
    let shape = tensor.shape();
    [shape[0], shape[1], shape[2], shape[3]]
}

/// Samples `first..first + count` of `[n, c, h, w]` as a `[c, count x h x w]` matrix (a copy
/// unless `c` or `count` is 1).
fn sample_rows(tensor: &CubeTensor, first: usize, count: usize) -> CubeTensor {
    let [_, channels, h, w] = dims(tensor);
    let swapped = into_contiguous(B::float_swap_dims(samples_of(tensor, first, count), 0, 1));
    B::float_reshape(swapped, Shape::from([channels, count * h * w]))
}

/// Samples `first..first + count` of `[n, c, h, w]` as a `[count x h x w, c]` matrix, a
/// pixel a row (a copy unless `c` is 1).
fn sample_pixels(tensor: &CubeTensor, first: usize, count: usize) -> CubeTensor {
    let [_, channels, h, w] = dims(tensor);
    let part = samples_of(tensor, first, count);
    let pixels = into_contiguous(B::float_permute(part, &[0, 2, 3, 1]));
    B::float_reshape(pixels, Shape::from([count * h * w, channels]))
}

/// Samples `first..first + count` of `tensor` (a view; the tensor itself when that is all).
fn samples_of(tensor: &CubeTensor, first: usize, count: usize) -> CubeTensor {
    if first == 0 && count == tensor.shape()[0] {
        tensor.clone()
    } else {
        B::float_slice(tensor.clone(), &[Slice::from(first..first + count)])
    }
}

/// A weight gradient summed as `[rows, first axis]` in the weight's shape.
fn from_transposed(gradient: CubeTensor, shape: Shape) -> CubeTensor {
    B::float_reshape(into_contiguous(B::float_swap_dims(gradient, 0, 1)), shape)
}

fn accumulate(sum: Option<CubeTensor>, part: CubeTensor) -> CubeTensor {
    match sum {
        None => part,
        Some(sum) => B::float_add(sum, part),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(channels: usize, positions: [usize; 2]) -> Window {
        Window {
            channels,
            image: [64, 64],
            positions,
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
        }
    }

    #[test]
    fn a_chunk_holds_at_most_its_bytes_and_at_least_one_sample() {
        // 288 rows x 4,096 positions (32 channels, 3 x 3, 64 x 64): 4.5 MiB a sample.
        let last = window(32, [64, 64]);
        let per_chunk = last.samples_per_chunk(1024, 4, CHUNK_BYTES);
        assert_eq!(per_chunk, 14);
        assert!(per_chunk * last.rows() * last.positions_per_sample() * 4 <= CHUNK_BYTES);
        assert!((per_chunk + 1) * last.rows() * last.positions_per_sample() * 4 > CHUNK_BYTES);
        // Never more than the micro-batch, never none.
        assert_eq!(last.samples_per_chunk(3, 4, CHUNK_BYTES), 3);
        let huge = window(4096, [256, 256]);
        assert_eq!(huge.samples_per_chunk(8, 4, CHUNK_BYTES), 1);
    }
}
