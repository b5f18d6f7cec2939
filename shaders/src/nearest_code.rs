//! The nearest codebook entry per latent position, by squared L2 distance, without the
//! `[positions x codes]` distance matrix: each invocation keeps its position's vector in
//! registers and a running minimum while its cube streams the codebook through shared
//! memory a tile at a time, so each code is read from device memory once per cube rather
//! than once per position. Ties go to the lower index, as an argmin does.
//!
//! CubeCL, so that it runs wherever the layers' kernels do: wgpu's WGSL (the browser's too)
//! and SPIR-V, and CUDA. It replaces a WGSL kernel of the same design, which a wgpu device
//! compiling SPIR-V cannot launch.

use burn_cubecl::cubecl;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;

/// Invocations per cube (one position each).
pub const NEAREST_CODE_CUBE: u32 = 64;

/// Largest latent width the kernel holds in registers (the default model's is 64).
pub const NEAREST_CODE_MAX_DIM: usize = 64;

/// Codes a cube holds in shared memory at once.
const TILE: usize = 32;

/// Most cubes a launch's one dimension takes (WebGPU's default limit).
const MAX_CUBES: usize = 65_535;

#[cube(launch_unchecked, address_type = "dynamic")]
fn nearest_code_kernel(
    latents: &Tensor<f32>,
    codebook: &Tensor<f32>,
    indices: &mut Tensor<u32>,
    positions: usize,
    codes: usize,
    #[comptime] dim: usize,
) {
    let mut tile = Shared::<[f32]>::new_slice(TILE * dim);
    let position = ABSOLUTE_POS;
    let in_range = position < positions;
    let mut z = Array::<f32>::new(dim);
    if in_range {
        #[unroll]
        for d in 0..dim {
            z[d] = latents[position * dim + d];
        }
    }
    let mut best = 0usize;
    let mut best_dist = f32::max_value();
    // Every invocation takes part in every tile, in range or not, so that all of them
    // reach each barrier; `codes` is a launch argument, the same for the whole cube.
    let mut start = 0usize;
    while start < codes {
        let mut count = codes - start;
        if count > TILE {
            count = TILE;
        }
        let mut i = UNIT_POS as usize;
        while i < count * dim {
            tile[i] = codebook[start * dim + i];
            i += CUBE_DIM as usize;
        }
        sync_cube();
        if in_range {
            for c in 0..count {
                let mut dist = 0.0f32;
                #[unroll]
                for d in 0..dim {
                    let diff = z[d] - tile[c * dim + d];
                    dist += diff * diff;
                }
                // Strictly less: ties keep the lower index.
                if dist < best_dist {
                    best_dist = dist;
                    best = start + c;
                }
            }
        }
        sync_cube();
        start += TILE;
    }
    if in_range {
        indices[position] = u32::cast_from(best);
    }
}

/// Whether one launch covers `positions` latents of width `dim` (none is left to the
/// caller's plain path, as is a width past [`NEAREST_CODE_MAX_DIM`]).
pub fn nearest_code_fits(positions: usize, dim: usize) -> bool {
    (1..=NEAREST_CODE_MAX_DIM).contains(&dim)
        && (1..=MAX_CUBES).contains(&positions.div_ceil(NEAREST_CODE_CUBE as usize))
}

/// `[positions]` u32 indices into `codebook` (`[codes, dim]`, f32) of the code nearest each
/// row of `latents` (`[positions, dim]`, f32), both on one device.
///
/// # Panics
/// Where [`nearest_code_fits`] refuses the shape, the codebook's width differs, or the
/// inputs are not f32.
pub fn nearest_code(latents: CubeTensor, codebook: CubeTensor) -> CubeTensor {
    latents.assert_is_on_same_device(&codebook);
    let latents = into_contiguous(latents);
    let codebook = into_contiguous(codebook);
    let [positions, dim] = [latents.meta.shape()[0], latents.meta.shape()[1]];
    let codes = codebook.meta.shape()[0];
    assert!(
        nearest_code_fits(positions, dim)
            && codebook.meta.shape()[1] == dim
            && latents.dtype == burn_backend::DType::F32
            && codebook.dtype == burn_backend::DType::F32,
        "nearest_code: {positions} x {dim} {:?} latents against a {:?} {:?} codebook are \
         outside the kernel's range",
        latents.dtype,
        codebook.meta.shape(),
        codebook.dtype
    );
    let indices = empty_device_contiguous_dtype(
        latents.client.clone(),
        latents.device.clone(),
        [positions].into(),
        burn_backend::DType::U32,
    );
    let cubes = positions.div_ceil(NEAREST_CODE_CUBE as usize) as u32;
    let address = crate::address_type(&[&latents, &codebook, &indices]);
    // SAFETY: an invocation reads latents only at its own position, below `positions`
    // (rows of `dim` values, contiguous), the codebook below `codes x dim`, shared memory
    // below `TILE x dim`, and writes `indices` at its position only.
    unsafe {
        nearest_code_kernel::launch_unchecked(
            &latents.client,
            CubeCount::Static(cubes, 1, 1),
            CubeDim::new_1d(NEAREST_CODE_CUBE),
            address,
            latents.clone().into_tensor_arg(),
            codebook.clone().into_tensor_arg(),
            indices.clone().into_tensor_arg(),
            positions,
            codes,
            dim,
        );
    }
    indices
}
