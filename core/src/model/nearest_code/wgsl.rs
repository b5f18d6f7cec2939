//! The nearest-code kernel of `shaders/` (WGSL) launched on burn's cubecl backend, as a
//! backend extension routed from the run-time `Dispatch` backend.
//!
//! Forward only: the quantizer's choice of code carries no gradient (the straight-through
//! estimator and the codebook's gradient go through the gathered codes), so the autodiff
//! backend passes the detached values straight to the kernel.

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::ops::IntTensorOps;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::wgpu::{
    CubeTensor, KernelSource, SourceKernel, SourceTemplate, into_contiguous,
};
use burn::backend::{Cube, backend_extension};
use burn::cubecl::prelude::KernelId;
use burn::cubecl::server::KernelArguments;
use burn::cubecl::{CubeCount, CubeDim};
use burn::tensor::{DType, Int, IntDType, Shape, Tensor};
use headroom_shaders::{NEAREST_CODE, NEAREST_CODE_MAX_DIM, NEAREST_CODE_WORKGROUP};

/// Most workgroups one dispatch dimension takes (WebGPU's default limit).
const MAX_WORKGROUPS: usize = 65_535;

#[backend_extension(Cube, Autodiff)]
pub trait NearestCode: burn::backend::Backend {
    /// `[positions]` indices into `codebook` (`[codes, dim]`) for `latents`
    /// (`[positions, dim]`), as `out_dtype`.
    fn nearest_code(
        latents: FloatTensor<Self>,
        codebook: FloatTensor<Self>,
        out_dtype: IntDType,
    ) -> IntTensor<Self>;
}

/// Whether one launch covers `positions` latents of width `dim` (an empty launch is left
/// to the plain path).
pub(super) fn fits(positions: usize, dim: usize) -> bool {
    (1..=NEAREST_CODE_MAX_DIM as usize).contains(&dim)
        && (1..=MAX_WORKGROUPS).contains(&positions.div_ceil(NEAREST_CODE_WORKGROUP as usize))
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

struct NearestCodeSource;

impl KernelSource for NearestCodeSource {
    fn source(&self) -> SourceTemplate {
        SourceTemplate::new(NEAREST_CODE)
    }

    fn id(&self) -> KernelId {
        KernelId::new::<Self>()
    }

    fn lang(&self) -> &'static str {
        "wgsl"
    }
}

impl NearestCode for Cube {
    fn nearest_code(latents: CubeTensor, codebook: CubeTensor, out_dtype: IntDType) -> CubeTensor {
        latents.assert_is_on_same_device(&codebook);
        let latents = into_contiguous(latents);
        let codebook = into_contiguous(codebook);
        let [positions, dim] = [latents.meta.shape()[0], latents.meta.shape()[1]];
        let codes = codebook.meta.shape()[0];
        assert!(
            fits(positions, dim)
                && codebook.meta.shape()[1] == dim
                && latents.dtype == DType::F32
                && codebook.dtype == DType::F32,
            "nearest_code: {positions} x {dim} {:?} latents against a {:?} {:?} codebook are \
             outside the kernel's range (model::nearest_code::fused_runs says which run)",
            latents.dtype,
            codebook.meta.shape(),
            codebook.dtype
        );
        let client = latents.client.clone();
        let indices = client.empty(positions * size_of::<u32>());
        let params: Vec<u8> = [positions as u32, codes as u32, dim as u32, 0]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let params = client.create_from_slice(&params);
        let workgroups = positions.div_ceil(NEAREST_CODE_WORKGROUP as usize) as u32;
        client.launch(
            Box::new(SourceKernel::new(
                NearestCodeSource,
                CubeDim::new_1d(NEAREST_CODE_WORKGROUP),
            )),
            CubeCount::Static(workgroups, 1, 1),
            KernelArguments::new().with_buffers(vec![
                latents.handle.clone().binding(),
                codebook.handle.clone().binding(),
                indices.clone().binding(),
                params.binding(),
            ]),
        );
        let indices = CubeTensor::new_contiguous(
            client,
            latents.device.clone(),
            Shape::from([positions]),
            indices,
            DType::U32,
        );
        Cube::int_cast(indices, out_dtype)
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
