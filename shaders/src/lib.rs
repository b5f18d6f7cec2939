//! Headroom's GPU kernels.
//!
//! - WGSL source for what serves the wgpu backend only ([`NEAREST_CODE`]): WGSL is what naga
//!   validates and what a reader of a GPU profile sees. Tested against a plain reference on
//!   whatever adapter the machine has (Mesa's lavapipe where there is no GPU), in `tests/`.
//! - CubeCL for what every cubecl runtime runs ([`conv_gemm`]: convolutions' gradients as
//!   matrix products), launched on burn's cubecl backend. Tested against burn's own kernels
//!   by the layers that call them (headroom-core's `gpu_layers`).

pub mod conv_gemm;

/// Nearest codebook entry per latent position by squared L2 distance, without the
/// `[positions x codes]` distance matrix: each invocation keeps its position's vector in
/// registers and a running minimum while the workgroup streams the codebook through
/// workgroup memory a tile at a time.
///
/// Bindings (group 0): 0 `latents: array<f32>` (`positions x dim`, row-major), 1 `codebook:
/// array<f32>` (`codes x dim`), 2 `indices: array<u32>` (`positions`, written), 3 `params:
/// vec4<u32>` (positions, codes, dim, unused), all storage buffers. `dim` is at most [`NEAREST_CODE_MAX_DIM`].
/// Dispatch `ceil(positions / NEAREST_CODE_WORKGROUP)` workgroups. Ties go to the lower index.
pub const NEAREST_CODE: &str = include_str!("nearest_code.wgsl");

/// Invocations per workgroup of [`NEAREST_CODE`] (one position each).
pub const NEAREST_CODE_WORKGROUP: u32 = 64;

/// Largest latent dimension [`NEAREST_CODE`] handles (the default model's is 64).
pub const NEAREST_CODE_MAX_DIM: u32 = 64;
