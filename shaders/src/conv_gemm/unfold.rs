//! The two data-movement kernels a convolution needs to become a matrix product, in NCHW:
//! [`unfold`] copies every window an image's convolution reads into the columns of a matrix
//! (im2col), [`fold`] adds such columns back onto an image (col2im, its adjoint).
//!
//! Columns are `[rows, samples x positions]`: a row per (channel, kernel row, kernel column)
//! of the window, the order of a convolution weight's `[out, channels, kh, kw]` read as a
//! `[out, rows]` matrix, and a column per (sample, window position), the order of an NCHW
//! output's planes. CubeCL, so that every cubecl runtime (wgpu's WGSL and SPIR-V, CUDA) runs
//! them; one invocation per value written, so no two invocations add to the same value.

use burn_backend::cubecl::dtype_to_storage_type;
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::cubecl::std::FastDivmod;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;

use super::Window;

/// A window's shape and steps, fixed for a layer: compiled into the kernels, so that their
/// divisions by them are a multiply and a shift and their loops over the taps unrolled.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(super) struct Taps {
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
}

impl Taps {
    fn of(window: &Window) -> Self {
        Self {
            kernel: window.kernel,
            stride: window.stride,
            padding: window.padding,
            dilation: window.dilation,
        }
    }
}

#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn unfold_kernel<E: Numeric>(
    image: &Tensor<E>,
    columns: &mut Tensor<E>,
    first: usize,
    width: FastDivmod<usize>,
    per_sample: FastDivmod<usize>,
    positions_w: FastDivmod<usize>,
    image_h: usize,
    image_w: usize,
    #[comptime] taps: Taps,
    #[define(E)] _dtype: ElemType,
) {
    if ABSOLUTE_POS >= columns.len() {
        terminate!();
    }
    let (row, column) = width.div_mod(ABSOLUTE_POS);
    let (sample, position) = per_sample.div_mod(column);
    let (oh, ow) = positions_w.div_mod(position);
    let kernel_taps = comptime![taps.kernel[0] * taps.kernel[1]];
    let channel = row / kernel_taps;
    let tap = row % kernel_taps;
    // Where the window's tap lands, measured from the padded image's corner (never negative).
    let y = oh * comptime![taps.stride[0]]
        + (tap / comptime![taps.kernel[1]]) * comptime![taps.dilation[0]];
    let x = ow * comptime![taps.stride[1]]
        + (tap % comptime![taps.kernel[1]]) * comptime![taps.dilation[1]];
    let pad_h = comptime![taps.padding[0]];
    let pad_w = comptime![taps.padding[1]];
    let mut value = E::from_int(0);
    if y >= pad_h && x >= pad_w && y - pad_h < image_h && x - pad_w < image_w {
        value = image[(first + sample) * image.stride(0)
            + channel * image.stride(1)
            + (y - pad_h) * image.stride(2)
            + (x - pad_w) * image.stride(3)];
    }
    columns[ABSOLUTE_POS] = value;
}

#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn fold_kernel<E: Numeric>(
    columns: &Tensor<E>,
    bias: &Tensor<E>,
    image: &mut Tensor<E>,
    offset: usize,
    values: usize,
    per_image: FastDivmod<usize>,
    plane: FastDivmod<usize>,
    image_w: FastDivmod<usize>,
    positions_h: usize,
    positions_w: usize,
    #[comptime] taps: Taps,
    #[comptime] with_bias: bool,
    #[comptime] relu: bool,
    #[define(E)] _dtype: ElemType,
) {
    if ABSOLUTE_POS >= values {
        terminate!();
    }
    let (sample, rest) = per_image.div_mod(ABSOLUTE_POS);
    let (channel, pixel) = plane.div_mod(rest);
    let (y, x) = image_w.div_mod(pixel);
    let y = y + comptime![taps.padding[0]];
    let x = x + comptime![taps.padding[1]];
    let stride_h = comptime![taps.stride[0]];
    let stride_w = comptime![taps.stride[1]];
    let mut sum = E::from_int(0);
    #[unroll]
    for ki in 0..comptime![taps.kernel[0]] {
        let reach_y = ki * comptime![taps.dilation[0]];
        if y >= reach_y {
            let oh = (y - reach_y) / stride_h;
            if oh * stride_h == y - reach_y && oh < positions_h {
                #[unroll]
                for kj in 0..comptime![taps.kernel[1]] {
                    let reach_x = kj * comptime![taps.dilation[1]];
                    if x >= reach_x {
                        let ow = (x - reach_x) / stride_w;
                        if ow * stride_w == x - reach_x && ow < positions_w {
                            let row = (channel * comptime![taps.kernel[0]] + ki)
                                * comptime![taps.kernel[1]]
                                + kj;
                            let column = (sample * positions_h + oh) * positions_w + ow;
                            sum += columns[row * columns.stride(0) + column * columns.stride(1)];
                        }
                    }
                }
            }
        }
    }
    if with_bias {
        sum += bias[channel];
    }
    // Two ifs: the outer one is decided when the kernel compiles, the inner one as it runs.
    #[allow(clippy::collapsible_if)]
    if relu {
        if sum < E::from_int(0) {
            sum = E::from_int(0);
        }
    }
    image[offset + ABSOLUTE_POS] = sum;
}

/// `[rows, count x positions]` columns of samples `first..first + count` of `image`
/// (`[samples, channels, h, w]`, any strides), zero where a window reads the padding.
pub fn unfold(image: &CubeTensor, first: usize, count: usize, window: &Window) -> CubeTensor {
    let width = count * window.positions_per_sample();
    // Contiguous, not as cubecl lays a new tensor out (it may pad rows): the kernel writes
    // value i at index i, as fold and planes write their outputs.
    let columns = empty_device_contiguous_dtype(
        image.client.clone(),
        image.device.clone(),
        [window.rows(), width].into(),
        image.dtype,
    );
    let values = window.rows() * width;
    if values == 0 {
        return columns;
    }
    let client = image.client.clone();
    let (cube_count, cube_dim, address) = super::launch_shape(values, &[image, &columns]);
    // SAFETY: every index the kernel reads lies inside `image` (the window's bounds are
    // checked against the image's shape, the samples against the caller's range inside the
    // tensor), and every index written is below `columns.len()`.
    unsafe {
        unfold_kernel::launch_unchecked(
            &client,
            cube_count,
            cube_dim,
            address,
            image.clone().into_tensor_arg(),
            columns.clone().into_tensor_arg(),
            first,
            width,
            window.positions_per_sample(),
            window.positions[1],
            window.image[0],
            window.image[1],
            Taps::of(window),
            dtype_to_storage_type(image.dtype),
        );
    }
    columns
}

/// What [`fold`] does to each value it sums before writing it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Epilogue<'a> {
    /// A value per channel added (`[channels]`).
    pub bias: Option<&'a CubeTensor>,
    /// Then negative values written as zero.
    pub relu: bool,
}

/// Adds `columns` (`[rows, count x positions]`, any strides) back onto the windows they were
/// read from, writing samples `first..first + count` of `image` (`[samples, channels, h, w]`,
/// contiguous) after `epilogue`: every value of those samples is written, the rest left as
/// they are.
pub fn fold(
    columns: &CubeTensor,
    image: &CubeTensor,
    first: usize,
    count: usize,
    window: &Window,
    epilogue: Epilogue,
) {
    let per_image = window.channels * window.image[0] * window.image[1];
    let values = count * per_image;
    if values == 0 {
        return;
    }
    let client = image.client.clone();
    let (cube_count, cube_dim, address) = super::launch_shape(values, &[image, columns]);
    // SAFETY: `image` is contiguous with `first + count` samples or more (the callers
    // allocate it whole), so `first * per_image + values` is in bounds; a column is read
    // only where its window position lies inside `window.positions` and its row inside
    // `window.rows()`, the shape `columns` has; the bias, where there is one, has a value
    // per channel.
    unsafe {
        fold_kernel::launch_unchecked(
            &client,
            cube_count,
            cube_dim,
            address,
            columns.clone().into_tensor_arg(),
            // Read only where there is one; the columns stand in (never read) where not.
            epilogue.bias.unwrap_or(columns).clone().into_tensor_arg(),
            image.clone().into_tensor_arg(),
            first * per_image,
            values,
            per_image,
            window.image[0] * window.image[1],
            window.image[1],
            window.positions[0],
            window.positions[1],
            Taps::of(window),
            epilogue.bias.is_some(),
            epilogue.relu,
            dtype_to_storage_type(image.dtype),
        );
    }
}
