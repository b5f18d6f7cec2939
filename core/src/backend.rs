//! Which burn backend a run uses, chosen at run time through burn's `Device`.

use std::fmt;
use std::str::FromStr;

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// burn's pure-Rust CPU backend: the default on CPU.
    Flex,
    /// burn's ndarray CPU backend: kept because users ask for it; much slower than flex.
    Ndarray,
    /// burn's wgpu backend (Vulkan, Metal, DX12) with WGSL kernels.
    Wgpu,
    /// burn's CUDA backend; needs the `cuda` cargo feature.
    Cuda,
}

/// One device of a backend, as burn addresses it: CUDA by index, wgpu adapters by their
/// kind and index among adapters of that kind on the graphics API burn's runtime uses here.
/// `None` where one is expected means the backend's default device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceTarget {
    Cuda(usize),
    DiscreteGpu(usize),
    IntegratedGpu(usize),
    VirtualGpu(usize),
    CpuAdapter,
}

impl DeviceTarget {
    pub fn backend(self) -> BackendKind {
        match self {
            DeviceTarget::Cuda(_) => BackendKind::Cuda,
            _ => BackendKind::Wgpu,
        }
    }
}

/// Where to run: a backend and, optionally, which of its devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub backend: BackendKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceTarget>,
}

impl From<BackendKind> for Target {
    fn from(backend: BackendKind) -> Self {
        Self {
            backend,
            device: None,
        }
    }
}

impl Target {
    pub fn device(self) -> Result<Device, BackendError> {
        self.backend.device_at(self.device)
    }

    pub fn training_device(self, checkpointing: bool) -> Result<Device, BackendError> {
        self.backend.training_device(self.device, checkpointing)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(
        "backend `{backend}` is not in this build; rebuild with it: \
         cargo build --release -p trainer-cli --features {backend}"
    )]
    NotBuilt { backend: BackendKind },
    #[error("unknown backend `{0}`; choose one of: flex, ndarray, wgpu, cuda")]
    Unknown(String),
    #[error(
        "{GPU_POOL_VAR}={0:?} is not a memory pool; use `adaptive` (cubecl's default) or \
         `exclusive` (one page per allocation, what a browser gets), or unset it"
    )]
    UnknownGpuPool(String),
    #[error("cannot start the wgpu device with the pool {GPU_POOL_VAR} asks for: {0}")]
    GpuPoolInit(String),
    #[error("cannot start the browser's WebGPU device: {0}; open the page with backend=cpu")]
    WebGpuStart(String),
    #[error("device {target:?} belongs to the {} backend, not {backend}", target.backend())]
    WrongBackend {
        backend: BackendKind,
        target: DeviceTarget,
    },
}

impl BackendKind {
    pub const ALL: [BackendKind; 4] = [
        BackendKind::Flex,
        BackendKind::Ndarray,
        BackendKind::Wgpu,
        BackendKind::Cuda,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Flex => "flex",
            BackendKind::Ndarray => "ndarray",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Cuda => "cuda",
        }
    }

    /// Whether this build carries the backend's cargo feature.
    pub fn is_built(self) -> bool {
        match self {
            BackendKind::Flex => cfg!(feature = "flex"),
            BackendKind::Ndarray => cfg!(feature = "ndarray"),
            BackendKind::Wgpu => cfg!(feature = "wgpu"),
            BackendKind::Cuda => cfg!(feature = "cuda"),
        }
    }

    /// CPU backends keep tensors in host memory, which the counting allocator measures.
    pub fn is_host(self) -> bool {
        matches!(self, BackendKind::Flex | BackendKind::Ndarray)
    }

    /// The backend's default device, without autodiff.
    pub fn device(self) -> Result<Device, BackendError> {
        match self {
            #[cfg(feature = "flex")]
            BackendKind::Flex => Ok(Device::flex()),
            #[cfg(feature = "ndarray")]
            #[allow(deprecated)]
            // burn deprecates ndarray in favour of flex; users still ask for it.
            BackendKind::Ndarray => Ok(Device::ndarray()),
            #[cfg(feature = "wgpu")]
            BackendKind::Wgpu => wgpu_device(burn::tensor::DeviceKind::DefaultDevice),
            #[cfg(feature = "cuda")]
            BackendKind::Cuda => Ok(Device::cuda(0)),
            #[allow(unreachable_patterns)]
            backend => Err(BackendError::NotBuilt { backend }),
        }
    }
}

impl BackendKind {
    /// A given device of this backend, without autodiff; `None`: the default device.
    pub fn device_at(self, target: Option<DeviceTarget>) -> Result<Device, BackendError> {
        let Some(target) = target else {
            return self.device();
        };
        if target.backend() != self {
            return Err(BackendError::WrongBackend {
                backend: self,
                target,
            });
        }
        match target {
            #[cfg(feature = "cuda")]
            DeviceTarget::Cuda(index) => Ok(Device::cuda(index)),
            #[cfg(feature = "wgpu")]
            DeviceTarget::DiscreteGpu(i) => wgpu_device(burn::tensor::DeviceKind::DiscreteGpu(i)),
            #[cfg(feature = "wgpu")]
            DeviceTarget::IntegratedGpu(i) => {
                wgpu_device(burn::tensor::DeviceKind::IntegratedGpu(i))
            }
            #[cfg(feature = "wgpu")]
            DeviceTarget::VirtualGpu(i) => wgpu_device(burn::tensor::DeviceKind::VirtualGpu(i)),
            #[cfg(feature = "wgpu")]
            DeviceTarget::CpuAdapter => wgpu_device(burn::tensor::DeviceKind::Cpu),
            #[allow(unreachable_patterns)]
            _ => Err(BackendError::NotBuilt { backend: self }),
        }
    }

    /// The device a training step runs on: autodiff, with burn's balanced gradient
    /// checkpointing when asked (recompute cheap activations in backward instead of keeping
    /// them). Tensors of the two kinds cannot mix, so a run keeps one for its whole life.
    pub fn training_device(
        self,
        target: Option<DeviceTarget>,
        checkpointing: bool,
    ) -> Result<Device, BackendError> {
        let device = self.device_at(target)?.autodiff();
        Ok(if checkpointing {
            device.gradient_checkpointing()
        } else {
            device
        })
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = BackendError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BackendKind::ALL
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| BackendError::Unknown(s.to_string()))
    }
}

/// The environment variable that picks cubecl's memory pool for wgpu devices: `adaptive`
/// (cubecl's default on native: allocations carved from shared pages) or `exclusive` (one
/// page per allocation in size buckets, what a browser gets). A measuring knob for
/// `bench/wgpu_memory`, which records the slack each leaves (docs/BENCHMARKS.md); runs
/// without it keep cubecl's default.
pub const GPU_POOL_VAR: &str = "HEADROOM_GPU_POOL";

/// The browser's WebGPU device: the page starts its runtime first (asynchronously, as a
/// browser requires; `Device::wgpu_options().init_async()`), and a page has no environment
/// to choose a pool from.
#[cfg(all(feature = "wgpu", target_arch = "wasm32"))]
fn wgpu_device(kind: burn::tensor::DeviceKind) -> Result<Device, BackendError> {
    Ok(Device::wgpu(kind))
}

/// Starts the browser's WebGPU device, as a browser requires (asynchronously) and before
/// anything uses it; then [`BackendKind::Wgpu`] trains on it. Returns the adapter in words:
/// its name, type and largest buffer.
#[cfg(all(feature = "wgpu", target_arch = "wasm32"))]
pub async fn start_webgpu() -> Result<String, BackendError> {
    let (_, setup) = Device::wgpu_options()
        .init_with_setup_async()
        .await
        .map_err(|e| BackendError::WebGpuStart(e.to_string()))?;
    let info = setup.adapter.get_info();
    let name = if info.name.is_empty() {
        "an unnamed adapter".to_string()
    } else {
        info.name
    };
    Ok(format!(
        "{name} ({:?}, largest buffer {} MiB)",
        info.device_type,
        setup.adapter.limits().max_buffer_size >> 20
    ))
}

/// A wgpu device, its runtime started with the pool [`GPU_POOL_VAR`] asks for the first time
/// the process asks for it (the pool can only be chosen before first use).
#[cfg(all(feature = "wgpu", not(target_arch = "wasm32")))]
fn wgpu_device(kind: burn::tensor::DeviceKind) -> Result<Device, BackendError> {
    use burn::tensor::wgpu::MemoryConfiguration;
    use std::sync::Mutex;

    let Some(asked) = std::env::var_os(GPU_POOL_VAR) else {
        return Ok(Device::wgpu(kind));
    };
    let pool = match asked.to_string_lossy().as_ref() {
        "adaptive" => MemoryConfiguration::Adaptive,
        "exclusive" => MemoryConfiguration::ExclusivePages,
        other => return Err(BackendError::UnknownGpuPool(other.to_string())),
    };
    static STARTED: Mutex<Vec<burn::tensor::DeviceKind>> = Mutex::new(Vec::new());
    let mut started = STARTED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if started.contains(&kind) {
        return Ok(Device::wgpu(kind));
    }
    let device = Device::wgpu_options()
        .device_kind(kind.clone())
        .memory_config(pool)
        .init()
        .map_err(|e| BackendError::GpuPoolInit(e.to_string()))?;
    started.push(kind);
    Ok(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for b in BackendKind::ALL {
            assert_eq!(b.name().parse::<BackendKind>().unwrap(), b);
        }
        assert!(
            "tpu"
                .parse::<BackendKind>()
                .unwrap_err()
                .to_string()
                .contains("flex, ndarray")
        );
    }

    #[test]
    fn a_backend_missing_from_the_build_says_how_to_get_it() {
        if !BackendKind::Cuda.is_built() {
            let err = BackendKind::Cuda.device().unwrap_err().to_string();
            assert!(err.contains("--features cuda"), "{err}");
        }
    }
}
