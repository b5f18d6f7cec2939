//! What the machine offers for training: every place a run could go (CUDA GPUs, wgpu
//! adapters, the CPU backends), with memory and precisions; `crate::auto` makes the
//! `--backend auto` choice from it.
//!
//! GPU drivers can hang or crash the process that asks them, so the GPU half of the probe
//! runs in a child process with a timeout ([`isolate`]); a failing driver costs a line in the
//! report, not the program.

pub mod cpu;
pub mod device_use;
pub mod gpus;
pub mod isolate;

use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::precision::Precision;

/// The log filter both front-ends use when `RUST_LOG` is not set: warnings, and nothing
/// from wgpu-hal, which logs every graphics API it fails to open while the probe enumerates
/// adapters (GL without a display, say) as an error; the probe reports what matters in its
/// own words. cubecl's warnings of a task that failed on the device (a buffer it refused)
/// are left out too: the step returns that failure, and Headroom says it (a dry-run halves,
/// a what-if falls back).
pub const DEFAULT_LOG_FILTER: &str = "warn,wgpu_hal=off,cubecl_runtime::logging::server=error,cubecl_common::device::handle::channel::task=error";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceClass {
    DiscreteGpu,
    IntegratedGpu,
    VirtualGpu,
    /// A GPU API implemented on the CPU (llvmpipe/lavapipe, SwiftShader, WARP).
    SoftwareAdapter,
    Cpu,
    Other,
}

impl DeviceClass {
    pub fn label(self) -> &'static str {
        match self {
            DeviceClass::DiscreteGpu => "discrete GPU",
            DeviceClass::IntegratedGpu => "integrated GPU",
            DeviceClass::VirtualGpu => "virtual GPU",
            DeviceClass::SoftwareAdapter => "software adapter",
            DeviceClass::Cpu => "CPU",
            DeviceClass::Other => "other",
        }
    }
}

/// A memory figure, or why there is none; `source` says where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryFigure {
    pub bytes: Option<u64>,
    pub source: String,
    /// The figure is a floor (an allocation probe stopped at its cap), not a reading.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_least: bool,
}

impl MemoryFigure {
    pub fn known(bytes: u64, source: impl Into<String>) -> Self {
        Self {
            bytes: Some(bytes),
            source: source.into(),
            at_least: false,
        }
    }

    pub fn at_least(bytes: u64, source: impl Into<String>) -> Self {
        Self {
            at_least: true,
            ..Self::known(bytes, source)
        }
    }

    pub fn unknown(reason: impl Into<String>) -> Self {
        Self {
            bytes: None,
            source: reason.into(),
            at_least: false,
        }
    }
}

/// One place training could run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub backend: BackendKind,
    /// What `--device` takes to name it: `cpu`, `wgpu:0`, `cuda:0`.
    pub selector: String,
    pub name: String,
    pub class: DeviceClass,
    /// Vulkan, Metal, DX12, GL, CUDA, or CPU.
    pub api: String,
    pub total_memory: MemoryFigure,
    pub free_memory: MemoryFigure,
    pub precisions: Vec<Precision>,
    /// Largest single buffer the device allows, where it says.
    pub max_allocation_bytes: Option<u64>,
    /// Whether this build can train on it; `notes` says why not.
    pub usable: bool,
    /// How burn addresses it; `None` for the CPU backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<crate::backend::DeviceTarget>,
    pub notes: Vec<String>,
}

/// The device a run trains on, in words, for people rather than for burn: the CPU's model
/// and threads for the CPU backends ("CPU: AMD EPYC 7B13, 2 threads"), the adapter's name,
/// graphics API and kernel language for wgpu ("llvmpipe (LLVM 15.0.6, 256 bits), Vulkan,
/// SPIR-V kernels"), the GPU's name for CUDA. A GPU device is opened if it is not open yet.
pub fn describe_device(backend: BackendKind, device: &burn::tensor::Device) -> String {
    if backend.is_host() {
        return cpu::describe();
    }
    gpus::describe(device).unwrap_or_else(|| format!("{backend} device"))
}

/// Everything the probe found, and what it could not look at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MachineReport {
    pub devices: Vec<DeviceReport>,
    /// Lines such as "no NVIDIA driver: libnvidia-ml.so not found".
    pub findings: Vec<String>,
    pub elapsed_ms: u64,
}

/// The GPU half, as the child process reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GpuReport {
    pub devices: Vec<DeviceReport>,
    pub findings: Vec<String>,
}

/// Probes the machine. `child` runs the GPU half in another process (see
/// [`isolate::ChildProbe`]); `None` probes GPUs in this process, for tools that accept the risk.
pub fn probe_machine(
    child: Option<&isolate::ChildProbe>,
    settings: gpus::ProbeSettings,
) -> MachineReport {
    let started = web_time::Instant::now();
    let gpus = match child {
        Some(child) => child.run().unwrap_or_else(|reason| GpuReport {
            devices: Vec::new(),
            findings: vec![format!("GPU probe failed: {reason}")],
        }),
        None => gpus::probe_here(settings),
    };
    let mut devices = gpus.devices;
    devices.extend(cpu::probe());
    MachineReport {
        devices,
        findings: gpus.findings,
        elapsed_ms: started.elapsed().as_millis() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_run_names_the_cpu_not_burns_device() {
        for backend in [BackendKind::Flex, BackendKind::Ndarray] {
            let Ok(device) = backend.device() else {
                continue;
            };
            let words = describe_device(backend, &device.autodiff());
            assert!(words.starts_with("CPU"), "{words}");
            if let Some(brand) = cpu::brand() {
                assert!(words.contains(&brand), "{words}");
            }
            assert!(!words.contains("Device<"), "{words}");
        }
    }

    /// The adapter's name and the graphics API burn's runtime reached it on (lavapipe on
    /// Vulkan in CI).
    #[cfg(feature = "wgpu")]
    #[test]
    fn a_wgpu_run_names_the_adapter_and_its_api() {
        let device = BackendKind::Wgpu
            .device()
            .expect("a wgpu adapter (lavapipe in CI)");
        let words = describe_device(BackendKind::Wgpu, &device);
        assert!(
            !words.contains("Device<") && !words.contains("Cube"),
            "{words}"
        );
        let (rest, kernels) = words.rsplit_once(", ").expect("name, API, kernels");
        let (name, api) = rest.rsplit_once(", ").expect("name, API");
        assert!(!name.is_empty(), "{words}");
        assert!(
            ["Vulkan", "Metal", "DX12", "GL", "WebGPU"].contains(&api),
            "{words}"
        );
        assert!(
            kernels.ends_with("kernels") || kernels.ends_with("matrices"),
            "{words}"
        );
        // SPIR-V only on Vulkan, and there in a build with the `vulkan` feature.
        assert!(!kernels.starts_with("SPIR-V") || api == "Vulkan", "{words}");
    }
}
