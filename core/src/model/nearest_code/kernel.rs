//! The nearest-code kernel of `shaders/` (CubeCL) launched on burn's cubecl backend, as a
//! backend extension routed from the run-time `Dispatch` backend.
//!
//! Forward only: the quantizer's choice of code carries no gradient (the straight-through
//! estimator and the codebook's gradient go through the gathered codes), so the autodiff
//! backend passes the detached values straight to the kernel.

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
#[cfg(feature = "fusion")]
use burn::backend::fusion::custom::TensorSpec;
use burn::backend::ops::IntTensorOps;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Cube, backend_extension};
#[cfg(feature = "fusion")]
use burn::tensor::Shape;
use burn::tensor::{Int, IntDType, Tensor};
use headroom_shaders::CubeBackend;
use headroom_shaders::nearest_code::nearest_code;

pub(super) use headroom_shaders::nearest_code::nearest_code_fits as fits;

#[backend_extension(Cube, Fusion: cfg(feature = "fusion"), Autodiff)]
pub trait NearestCode: burn::backend::Backend {
    /// `[positions]` indices into `codebook` (`[codes, dim]`) for `latents`
    /// (`[positions, dim]`), as `out_dtype`.
    #[fusion(meta = codes_spec)]
    fn nearest_code(
        latents: FloatTensor<Self>,
        codebook: FloatTensor<Self>,
        out_dtype: IntDType,
    ) -> IntTensor<Self>;
}

pub(super) fn nearest_codes(latents: Tensor<2>, codebook: Tensor<2>) -> Tensor<1, Int> {
    let out_dtype = latents.device().settings().int_dtype;
    let codes = burn::backend::Dispatch::nearest_code(
        latents.into_dispatch(),
        codebook.into_dispatch(),
        out_dtype,
    );
    Tensor::from_dispatch(codes)
}

/// One code per latent position, of the asked integer type.
#[cfg(feature = "fusion")]
fn codes_spec(latents: &TensorSpec, _codebook: &TensorSpec, out_dtype: &IntDType) -> TensorSpec {
    TensorSpec::new(Shape::from([latents.shape[0]]), (*out_dtype).into())
}

// On burn's cubecl backend without fusion; with fusion on, `backend_extension` queues this
// in the fusion stream.
impl NearestCode for CubeBackend {
    fn nearest_code(
        latents: FloatTensor<CubeBackend>,
        codebook: FloatTensor<CubeBackend>,
        out_dtype: IntDType,
    ) -> IntTensor<CubeBackend> {
        CubeBackend::int_cast(nearest_code(latents, codebook), out_dtype)
    }
}

impl<C: CheckpointStrategy> NearestCode for Autodiff<Cube, C> {
    fn nearest_code(
        latents: FloatTensor<Self>,
        codebook: FloatTensor<Self>,
        out_dtype: IntDType,
    ) -> IntTensor<Self> {
        Cube::nearest_code(
            latents.into_primitive(),
            codebook.into_primitive(),
            out_dtype,
        )
    }
}
