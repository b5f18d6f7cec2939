//! A product's rows laid out as NCHW planes: `[channels, samples x positions]`, the order
//! a weight times unfolded columns comes out in, written as samples `first..` of a
//! `[samples, channels, h, w]` tensor, with a bias and ReLU on the way ([`Epilogue`]). One
//! pass where a transpose, a copy and the bias and ReLU each would be one.

use burn_backend::cubecl::dtype_to_storage_type;
use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::cubecl::std::FastDivmod;
use burn_cubecl::tensor::CubeTensor;

use super::unfold::Epilogue;

#[cube(launch_unchecked, address_type = "dynamic")]
fn planes_kernel<E: Numeric>(
    rows: &Tensor<E>,
    bias: &Tensor<E>,
    planes: &mut Tensor<E>,
    offset: usize,
    values: usize,
    per_sample: FastDivmod<usize>,
    positions: FastDivmod<usize>,
    positions_count: usize,
    #[comptime] with_bias: bool,
    #[comptime] relu: bool,
    #[define(E)] _dtype: ElemType,
) {
    if ABSOLUTE_POS >= values {
        terminate!();
    }
    let (sample, rest) = per_sample.div_mod(ABSOLUTE_POS);
    let (channel, position) = positions.div_mod(rest);
    let column = sample * positions_count + position;
    let mut value = rows[channel * rows.stride(0) + column * rows.stride(1)];
    if with_bias {
        value += bias[channel];
    }
    // Two ifs: the outer one is decided when the kernel compiles, the inner one as it runs.
    #[allow(clippy::collapsible_if)]
    if relu {
        if value < E::from_int(0) {
            value = E::from_int(0);
        }
    }
    planes[offset + ABSOLUTE_POS] = value;
}

/// Writes `rows` (`[channels, count x positions]`, any strides) as samples
/// `first..first + count` of `planes` (`[samples, channels, h, w]` with `h x w = positions`,
/// contiguous) after `epilogue`; the other samples are left as they are.
pub fn planes(
    rows: &CubeTensor,
    planes: &CubeTensor,
    first: usize,
    count: usize,
    epilogue: Epilogue,
) {
    let shape = planes.meta.shape();
    let (channels, positions) = (shape[1], shape[2] * shape[3]);
    let per_sample = channels * positions;
    let values = count * per_sample;
    if values == 0 {
        return;
    }
    let client = planes.client.clone();
    let (cube_count, cube_dim, address) = super::launch_shape(values, &[planes, rows]);
    // SAFETY: `planes` is contiguous with `first + count` samples or more (the callers
    // allocate it whole), so `first * per_sample + values` is in bounds; a row is read at a
    // channel below `channels` and a column below `count x positions`, the shape `rows`
    // has; the bias, where there is one, has a value per channel.
    unsafe {
        planes_kernel::launch_unchecked(
            &client,
            cube_count,
            cube_dim,
            address,
            rows.clone().into_tensor_arg(),
            epilogue.bias.unwrap_or(rows).clone().into_tensor_arg(),
            planes.clone().into_tensor_arg(),
            first * per_sample,
            values,
            per_sample,
            positions,
            positions,
            epilogue.bias.is_some(),
            epilogue.relu,
            dtype_to_storage_type(planes.dtype),
        );
    }
}
