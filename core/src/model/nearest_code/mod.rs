//! The quantizer's choice of code: the nearest codebook entry per latent position.
//!
//! Two forms with one answer. The plain form is tensor code any backend runs: the
//! `[positions x codes]` matrix of squared distances, then its argmin. On a cubecl device
//! (wgpu, CUDA) the fused form runs `shaders/`'s CubeCL kernel instead (through a burn
//! backend extension, [`kernel`]), which keeps a running minimum per position and never
//! builds that matrix (8x the latents' size at 512 codes of 64 values). In training the matrix is transient, and
//! the kernel does not lower a step's peak at the sizes measured (`docs/BENCHMARKS.md`,
//! "Memory of a step on wgpu").

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod kernel;

use burn::tensor::{Device, Int, Tensor};

use super::LayerForms;

/// Index of the nearest row of `codebook` (`[codes, dim]`) for each row of `latents`
/// (`[positions, dim]`), by squared L2 distance; ties go to the lower index. Both inputs
/// are detached values: the choice has no gradient.
pub fn nearest_codes(latents: Tensor<2>, codebook: Tensor<2>, forms: LayerForms) -> Tensor<1, Int> {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    if forms == LayerForms::Auto && fused_runs(&latents, &codebook) {
        return kernel::nearest_codes(latents, codebook);
    }
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    let _ = forms;
    plain_nearest_codes(latents, codebook)
}

/// The distance matrix, `|z|^2 - 2 z.e + |e|^2`, and its argmin.
pub(crate) fn plain_nearest_codes(latents: Tensor<2>, codebook: Tensor<2>) -> Tensor<1, Int> {
    let positions = latents.dims()[0];
    let distances = latents.clone().square().sum_dim(1)
        - latents.matmul(codebook.clone().transpose()).mul_scalar(2.0)
        + codebook.square().sum_dim(1).reshape([1, -1]);
    distances.argmin(1).reshape([positions])
}

/// Whether the fused kernel serves these inputs: a cubecl device ([`fused_on`]), f32
/// values, a latent width the kernel holds in registers, and few enough positions for one
/// row of cubes.
pub fn fused_runs(latents: &Tensor<2>, codebook: &Tensor<2>) -> bool {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    {
        let [positions, dim] = latents.dims();
        fused_on(&latents.device())
            && latents.dtype() == burn::tensor::DType::F32
            && codebook.dtype() == burn::tensor::DType::F32
            && codebook.dims()[1] == dim
            && kernel::fits(positions, dim)
    }
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    {
        let _ = (latents, codebook);
        false
    }
}

/// Whether the fused kernel would run for the model's quantizer on `device`: a cubecl
/// device (wgpu, whatever its kernels are compiled to, or CUDA).
pub fn fused_on(device: &Device) -> bool {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    {
        super::gpu_layers::runs_on(device)
    }
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    {
        let _ = device;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;
    use burn::tensor::Distribution;

    #[test]
    fn the_plain_form_picks_the_first_nearest_code() {
        let device = BackendKind::Flex.device().unwrap();
        let codebook = Tensor::<2>::from_floats([[0.0, 0.0], [1.0, 0.0], [1.0, 0.0]], &device);
        let latents = Tensor::<2>::from_floats([[0.9, 0.1], [0.1, -0.1], [0.5, 0.0]], &device);
        let codes = plain_nearest_codes(latents, codebook)
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .unwrap();
        // Rows 1 and 2 of the codebook tie for the first latent; the lower index wins.
        // The third latent is equidistant from codes 0 and 1.
        assert_eq!(codes, [1, 0, 0]);
    }

    #[test]
    fn no_fused_form_on_the_cpu() {
        let device = BackendKind::Flex.device().unwrap();
        let latents = Tensor::<2>::random([4, 64], Distribution::Default, &device);
        let codebook = Tensor::<2>::random([8, 64], Distribution::Default, &device);
        assert!(!fused_runs(&latents, &codebook));
        assert!(!fused_on(&device));
    }
}
