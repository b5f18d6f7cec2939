//! Kernel launches of the timed steps on a cubecl device (wgpu, CUDA), counted through
//! cubecl's launch observer: every launch the process issues, on the issuing thread,
//! before it is submitted. What a step launches is what fusion and matrix-product forms
//! change, and on a GPU each launch costs a few microseconds whatever it computes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use burn::cubecl::logging::{LaunchObservation, LaunchObserver};
use serde::{Deserialize, Serialize};

/// A kernel's launches over the timed steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelLaunches {
    /// The kernel's type as cubecl names it, without module paths and with its generic
    /// arguments one level deep ([`short_name`]): `KernelBinop<AddOp>`.
    pub kernel: String,
    pub launches: u64,
}

/// `name` (a Rust type's full name) without its module paths and its generic arguments'
/// own arguments: cubek's matmul is named by a type of 1,500 characters, and what tells
/// two kernels apart (burn's element-wise kernel and its op) is in the first level.
pub fn short_name(name: &str) -> String {
    let mut short = String::with_capacity(name.len().min(160));
    let mut depth = 0usize;
    let mut word = String::new();
    for c in name.chars() {
        match c {
            ':' => word.clear(),
            '<' | '>' | ',' => {
                if depth <= 1 {
                    short.push_str(&word);
                }
                word.clear();
                if c == '<' {
                    if depth == 0 {
                        short.push('<');
                    }
                    depth += 1;
                } else if c == '>' {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        short.push('>');
                    }
                } else if depth <= 1 {
                    short.push_str(", ");
                }
            }
            ' ' => {}
            _ => word.push(c),
        }
    }
    if depth == 0 {
        short.push_str(&word);
    }
    short
}

#[derive(Default)]
struct Tally(Mutex<HashMap<&'static str, u64>>);

impl LaunchObserver for Tally {
    fn launched(&self, kernel: &'static str) {
        *self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(kernel)
            .or_default() += 1;
    }
}

/// Counts launches from its start until [`Launches::finish`]; one at a time per process
/// (a second replaces the first while it lasts).
pub struct Launches {
    tally: Arc<Tally>,
    watching: LaunchObservation,
}

impl Launches {
    pub fn start() -> Self {
        let tally = Arc::new(Tally::default());
        let watching = LaunchObservation::new(tally.clone());
        Self { tally, watching }
    }

    /// Stops counting; each kernel's launches, most launched first (then by name).
    pub fn finish(self) -> Vec<KernelLaunches> {
        let Self { tally, watching } = self;
        drop(watching);
        let counts = std::mem::take(&mut *tally.0.lock().unwrap_or_else(PoisonError::into_inner));
        let mut by_name: HashMap<String, u64> = HashMap::new();
        for (kernel, launches) in counts {
            *by_name.entry(short_name(kernel)).or_default() += launches;
        }
        let mut kernels: Vec<KernelLaunches> = by_name
            .into_iter()
            .map(|(kernel, launches)| KernelLaunches { kernel, launches })
            .collect();
        kernels.sort_by(|a, b| b.launches.cmp(&a.launches).then(a.kernel.cmp(&b.kernel)));
        kernels
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;
    use burn::tensor::Tensor;

    #[test]
    fn a_kernels_name_keeps_its_type_and_first_generic_arguments() {
        assert_eq!(
            short_name(
                "burn_cubecl::kernel::binary::kernel_binop::KernelBinop<burn_cubecl::kernel::binary::AddOp>"
            ),
            "KernelBinop<AddOp>"
        );
        assert_eq!(
            short_name(
                "a::MatmulEntry<b::TensorArgs, c::DynamicScalar<d::__Lhs>, e::F<g::H, i::J>>"
            ),
            "MatmulEntry<TensorArgs, DynamicScalar, F>"
        );
        assert_eq!(
            short_name("headroom_shaders::conv_gemm::unfold::unfold_kernel::UnfoldKernel"),
            "UnfoldKernel"
        );
    }

    /// An element-wise op and a matrix product on wgpu are at least two launches; a
    /// count around nothing is none.
    #[test]
    fn counts_the_launches_of_ops_on_a_cubecl_device() {
        let _alone = crate::wgpu_pool_alone();
        let device = BackendKind::Wgpu
            .device()
            .expect("a wgpu adapter (lavapipe in CI)");
        let a = Tensor::<2>::ones([64, 64], &device);
        let _ = device.sync();
        let idle = Launches::start();
        let _ = device.sync();
        assert_eq!(idle.finish(), vec![]);
        let launches = Launches::start();
        let b = a.clone().matmul(a).exp();
        let _ = device.sync();
        let kernels = launches.finish();
        drop(b);
        let total: u64 = kernels.iter().map(|k| k.launches).sum();
        assert!(total >= 2, "{kernels:?}");
        assert!(kernels.windows(2).all(|w| w[0].launches >= w[1].launches));
    }
}
