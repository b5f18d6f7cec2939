//! Headroom's GPU kernels, in CubeCL, so that every cubecl runtime runs them (wgpu's WGSL,
//! the browser's included, and SPIR-V; CUDA), launched on burn's cubecl backend:
//!
//! - [`conv_gemm`]: convolutions and their gradients as matrix products. Tested against
//!   burn's own kernels by the layers that call them (headroom-core's `gpu_layers`).
//! - [`nearest_code`](mod@nearest_code): the quantizer's nearest codebook entry per latent
//!   position. Tested against an f64 reference and the plain tensor path by headroom-core's
//!   `wgpu_nearest_code` tests.

pub mod conv_gemm;
pub mod nearest_code;

/// burn's cubecl backend without fusion: the one the kernels here launch on.
pub use burn_cubecl::CubeBackend;

use burn_cubecl::cubecl::prelude::AddressType;
use burn_cubecl::tensor::CubeTensor;

/// The index width a kernel touching `tensors` needs: the widest any of them needs.
fn address_type(tensors: &[&CubeTensor]) -> AddressType {
    tensors
        .iter()
        .map(|t| t.required_address_type())
        .max()
        .unwrap_or_default()
}
