//! The GPU half of the probe: NVIDIA GPUs through NVML (loaded at run time, so it works
//! without the `cuda` feature), and every adapter wgpu enumerates, with free memory from
//! Vulkan's memory-budget extension where the adapter is Vulkan. Meant to run in a child
//! process (see [`super::isolate`]).

// A web page's build without wgpu (app/web's module with threads) reports no GPU at all.
#[cfg_attr(
    all(target_arch = "wasm32", not(feature = "wgpu")),
    allow(unused_imports)
)]
use super::{DeviceClass, DeviceReport, GpuReport, MemoryFigure, Precision};
#[cfg_attr(
    all(target_arch = "wasm32", not(feature = "wgpu")),
    allow(unused_imports)
)]
use crate::backend::{BackendKind, DeviceTarget};

/// How far the GPU probe may go beyond asking drivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProbeSettings {
    /// Where no API reports free memory, allocate up to this many bytes in steps to find
    /// out (seed 004's allocation test); `None` never allocates.
    pub allocation_cap: Option<u64>,
    /// Also allocate on CPU-type adapters (llvmpipe, lavapipe), which auto never picks.
    pub software_adapters: bool,
}

impl ProbeSettings {
    /// What `--backend auto` probes with: an allocation probe of at most 1 GiB where a GPU's
    /// free memory is otherwise unknown, never on CPU-type adapters (auto never picks them).
    pub const AUTO: ProbeSettings = ProbeSettings {
        allocation_cap: Some(1 << 30),
        software_adapters: false,
    };
}

/// Bytes per step of the allocation probe.
pub const ALLOCATION_STEP: u64 = 128 << 20;

pub fn probe_here(settings: ProbeSettings) -> GpuReport {
    let mut report = GpuReport::default();
    nvidia(&mut report);
    adapters(&mut report, settings);
    report
}

/// A web page cannot load NVIDIA's driver library; a browser's GPU is reached through WebGPU.
#[cfg(target_arch = "wasm32")]
fn nvidia(report: &mut GpuReport) {
    report
        .findings
        .push("no NVML in WebAssembly: GPUs are reached through WebGPU".into());
}

#[cfg(not(target_arch = "wasm32"))]
fn nvidia(report: &mut GpuReport) {
    let nvml = match nvml_wrapper::Nvml::init() {
        Ok(nvml) => nvml,
        Err(e) => {
            report
                .findings
                .push(format!("no CUDA device or driver: NVML did not load ({e})"));
            return;
        }
    };
    let count = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => {
            report
                .findings
                .push(format!("NVML loaded but cannot count devices: {e}"));
            return;
        }
    };
    if count == 0 {
        report
            .findings
            .push("NVIDIA driver present, no CUDA device".to_string());
    }
    for index in 0..count {
        let device = match nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => {
                report.findings.push(format!("CUDA device {index}: {e}"));
                continue;
            }
        };
        let name = device
            .name()
            .unwrap_or_else(|e| format!("NVIDIA GPU {index} (name: {e})"));
        let (total, free) = match device.memory_info() {
            Ok(m) => (
                MemoryFigure::known(m.total, "NVML"),
                MemoryFigure::known(m.free, "NVML"),
            ),
            Err(e) => (
                MemoryFigure::unknown(format!("NVML: {e}")),
                MemoryFigure::unknown(format!("NVML: {e}")),
            ),
        };
        let mut notes = Vec::new();
        if !BackendKind::Cuda.is_built() {
            notes.push(
                "the cuda backend is not in this build: cargo build --release -p trainer-cli --features cuda"
                    .to_string(),
            );
        }
        report.devices.push(DeviceReport {
            backend: BackendKind::Cuda,
            selector: format!("cuda:{index}"),
            name,
            class: DeviceClass::DiscreteGpu,
            api: "CUDA".to_string(),
            total_memory: total,
            free_memory: free,
            precisions: vec![Precision::F32, Precision::F16, Precision::Bf16],
            max_allocation_bytes: None,
            usable: BackendKind::Cuda.is_built(),
            target: Some(DeviceTarget::Cuda(index as usize)),
            notes,
        });
    }
}

/// A graphics API by its usual name: Vulkan, Metal, DX12, GL, WebGPU.
#[cfg(feature = "wgpu")]
pub fn api_name(api: wgpu::Backend) -> &'static str {
    match api {
        wgpu::Backend::Vulkan => "Vulkan",
        wgpu::Backend::Metal => "Metal",
        wgpu::Backend::Dx12 => "DX12",
        wgpu::Backend::Gl => "GL",
        wgpu::Backend::BrowserWebGpu => "WebGPU",
        wgpu::Backend::Noop => "no-op",
    }
}

/// A GPU device a run trains on, in words: its name as burn's runtime reports it, the API
/// it runs on, and on wgpu what its kernels are compiled to ("llvmpipe (LLVM 15.0.6, 256
/// bits), Vulkan, SPIR-V kernels"; "NVIDIA H100 PCIe, CUDA").
/// Opens the device if it is not open yet; `None` for a device that reports no name.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub fn describe(device: &burn::tensor::Device) -> Option<String> {
    use burn::backend::{CubeDevice, DispatchDevice};

    let device = device.clone().without_autodiff();
    // Browsers leave the adapter's name out unless the user allows it (fingerprinting).
    let name = Some(device.identity()?.name)
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "an unnamed adapter".to_string());
    let api = match device.as_dispatch() {
        #[cfg(feature = "wgpu")]
        DispatchDevice::Cube(cube @ CubeDevice::Wgpu(wgpu_device)) => {
            let api = api_name(runtime_api(cube, wgpu_device.backend));
            let client = cube.client();
            let cooperative = !client.properties().features.matmul.cmma.is_empty();
            Some(format!(
                "{api}, {}",
                kernel_words(client.name(), cooperative)
            ))
        }
        #[cfg(feature = "cuda")]
        DispatchDevice::Cube(CubeDevice::Cuda(_)) => Some("CUDA".to_string()),
        _ => None,
    };
    Some(match api {
        Some(api) => format!("{name}, {api}"),
        None => name,
    })
}

#[cfg(not(any(feature = "wgpu", feature = "cuda")))]
pub fn describe(_device: &burn::tensor::Device) -> Option<String> {
    None
}

/// What cubecl compiles a wgpu device's kernels to, by its runtime's name, and whether
/// its matrix products may take cooperative-matrix (tensor core) tiles.
#[cfg(feature = "wgpu")]
fn kernel_words(runtime: &str, cooperative: bool) -> &'static str {
    match (runtime, cooperative) {
        ("wgpu<spirv>", true) => "SPIR-V kernels with cooperative matrices",
        ("wgpu<spirv>", false) => "SPIR-V kernels",
        ("wgpu<msl>", _) => "MSL kernels",
        _ => "WGSL kernels",
    }
}

/// The graphics API an open wgpu device of burn's runtime runs on: the one it pins, or the
/// one cubecl's automatic choice settled on (Vulkan wherever it reaches a GPU).
#[cfg(feature = "wgpu")]
fn runtime_api(
    device: &burn::backend::CubeDevice,
    backend: burn::tensor::wgpu::WgpuBackend,
) -> wgpu::Backend {
    use burn::cubecl::wgpu::{AutoGraphicsApi, GraphicsApi};
    use burn::tensor::wgpu::WgpuBackend;

    match backend {
        // The runtime's name says which compiler serves the device, and SPIR-V and MSL each
        // serve one API. For WGSL cubecl is asked again, once a process: that enumerates the
        // APIs (and has GL without a display complain on stderr).
        WgpuBackend::Auto => match device.client().name() {
            "wgpu<spirv>" => wgpu::Backend::Vulkan,
            "wgpu<msl>" => wgpu::Backend::Metal,
            _ => {
                static SETTLED: std::sync::OnceLock<wgpu::Backend> = std::sync::OnceLock::new();
                *SETTLED.get_or_init(AutoGraphicsApi::backend)
            }
        },
        WgpuBackend::Vulkan => wgpu::Backend::Vulkan,
        WgpuBackend::Metal => wgpu::Backend::Metal,
        WgpuBackend::Dx12 => wgpu::Backend::Dx12,
        WgpuBackend::Gl => wgpu::Backend::Gl,
        WgpuBackend::WebGpu => wgpu::Backend::BrowserWebGpu,
    }
}

#[cfg(not(feature = "wgpu"))]
fn adapters(report: &mut GpuReport, _settings: ProbeSettings) {
    report
        .findings
        .push("wgpu adapters not probed: the wgpu backend is not in this build".to_string());
}

#[cfg(feature = "wgpu")]
fn adapters(report: &mut GpuReport, settings: ProbeSettings) {
    use wgpu::{Backends, DeviceType, Features, Instance, InstanceDescriptor};

    let instance = Instance::new(InstanceDescriptor {
        backends: Backends::all(),
        ..InstanceDescriptor::new_without_display_handle()
    });
    let adapters = futures_lite::future::block_on(instance.enumerate_adapters(Backends::all()));
    if adapters.is_empty() {
        report
            .findings
            .push("wgpu found no adapter (no Vulkan, Metal, DX12 or GL driver)".to_string());
    }
    let budgets = headroom_gpu_memory::vulkan_heaps();
    let native = headroom_gpu_memory::os_adapters();
    // burn's wgpu runtime comes up on the first API of this chain that has an adapter, and
    // numbers adapters per kind within it (cubecl-wgpu's AutoGraphicsApi).
    let chain: &[wgpu::Backend] = if cfg!(target_os = "macos") {
        &[wgpu::Backend::Metal]
    } else {
        &[
            wgpu::Backend::Vulkan,
            wgpu::Backend::Dx12,
            wgpu::Backend::Gl,
        ]
    };
    let runtime_api = chain
        .iter()
        .copied()
        .find(|api| adapters.iter().any(|a| a.get_info().backend == *api));
    let mut per_kind = [0usize; 4];
    for (index, adapter) in adapters.iter().enumerate() {
        let info = adapter.get_info();
        let class = match info.device_type {
            DeviceType::DiscreteGpu => DeviceClass::DiscreteGpu,
            DeviceType::IntegratedGpu => DeviceClass::IntegratedGpu,
            DeviceType::VirtualGpu => DeviceClass::VirtualGpu,
            DeviceType::Cpu => DeviceClass::SoftwareAdapter,
            DeviceType::Other => DeviceClass::Other,
        };
        let api = api_name(info.backend).to_string();
        let mut precisions = vec![Precision::F32];
        if adapter.features().contains(Features::SHADER_F16) {
            precisions.push(Precision::F16);
        }
        let heap = (info.backend == wgpu::Backend::Vulkan)
            .then(|| {
                budgets
                    .iter()
                    .find(|h| h.is(info.vendor, info.device, &info.name))
            })
            .flatten();
        let (mut total, mut free) = match heap {
            Some(h) => (figure(&h.total), figure(&h.free)),
            None => (
                MemoryFigure::unknown(format!("{api} reports no memory size here")),
                MemoryFigure::unknown(format!("{api} reports no free memory here")),
            ),
        };
        // DXGI (Windows) and Metal (macOS) know the adapter whatever API wgpu reached it by.
        if let Some(n) = native
            .iter()
            .find(|n| n.is(info.vendor, info.device, &info.name))
        {
            if free.bytes.is_none() {
                free = figure(&n.free);
            }
            if total.bytes.is_none() {
                total = figure(&n.total);
            }
        }
        let allowed = settings.software_adapters || class != DeviceClass::SoftwareAdapter;
        if free.bytes.is_none()
            && allowed
            && let Some(cap) = settings.allocation_cap
        {
            free = allocation::probe(adapter, cap, &free.source);
        }
        let mut notes = Vec::new();
        let target = if Some(info.backend) == runtime_api {
            let slot = |i: usize, per_kind: &mut [usize; 4]| {
                per_kind[i] += 1;
                per_kind[i] - 1
            };
            match info.device_type {
                DeviceType::DiscreteGpu => Some(DeviceTarget::DiscreteGpu(slot(0, &mut per_kind))),
                DeviceType::IntegratedGpu => {
                    Some(DeviceTarget::IntegratedGpu(slot(1, &mut per_kind)))
                }
                DeviceType::VirtualGpu => Some(DeviceTarget::VirtualGpu(slot(2, &mut per_kind))),
                DeviceType::Cpu => Some(DeviceTarget::CpuAdapter),
                DeviceType::Other => None,
            }
        } else {
            None
        };
        if target.is_none() {
            notes.push(match runtime_api {
                Some(api) if api != info.backend => format!(
                    "burn's wgpu runtime uses {api:?} on this machine, not {:?}",
                    info.backend
                ),
                _ => "burn's wgpu runtime cannot address this adapter".to_string(),
            });
        }
        if class == DeviceClass::SoftwareAdapter {
            notes.push("runs on the CPU: slower than flex, never chosen automatically".to_string());
        }
        if !info.driver.is_empty() {
            notes.push(
                format!("driver {} {}", info.driver, info.driver_info)
                    .trim()
                    .to_string(),
            );
        }
        report.devices.push(DeviceReport {
            backend: BackendKind::Wgpu,
            selector: format!("wgpu:{index}"),
            name: info.name.clone(),
            class,
            api,
            total_memory: total,
            free_memory: free,
            precisions,
            // What one tensor may take: cubecl's pages are bounded by both limits, and the
            // storage binding is the smaller on the drivers seen (an H200 refused a 2 GiB
            // buffer that the adapter's 4 GiB `max_buffer_size` would allow).
            max_allocation_bytes: Some(
                adapter
                    .limits()
                    .max_buffer_size
                    .min(adapter.limits().max_storage_buffer_binding_size),
            ),
            usable: target.is_some(),
            target,
            notes,
        });
    }
}

/// What the operating system's graphics API says (headroom-gpu-memory), as the probe's figure.
#[cfg(feature = "wgpu")]
fn figure(reading: &headroom_gpu_memory::Figure) -> MemoryFigure {
    match reading.bytes {
        Some(bytes) => MemoryFigure::known(bytes, reading.source.clone()),
        None => MemoryFigure::unknown(reading.source.clone()),
    }
}

/// Free memory found by allocating it: buffers of [`ALLOCATION_STEP`] bytes, each cleared so
/// the driver must back it, until one fails or the cap is reached; all freed at the end.
#[cfg(feature = "wgpu")]
mod allocation {
    use super::{ALLOCATION_STEP, MemoryFigure};
    use crate::size::human;
    use wgpu::{BufferDescriptor, BufferUsages, DeviceDescriptor, ErrorFilter, PollType};

    pub fn probe(adapter: &wgpu::Adapter, cap: u64, why: &str) -> MemoryFigure {
        let step = ALLOCATION_STEP.min(adapter.limits().max_buffer_size) & !3;
        let requested = futures_lite::future::block_on(adapter.request_device(&DeviceDescriptor {
            label: Some("headroom allocation probe"),
            required_limits: adapter.limits(),
            ..Default::default()
        }));
        let (device, queue) = match requested {
            Ok(pair) => pair,
            Err(e) => {
                return MemoryFigure::unknown(format!(
                    "{why}; the allocation probe could not open the device: {e}"
                ));
            }
        };
        let mut buffers = Vec::new();
        let mut allocated = 0u64;
        let mut failure = None;
        while step > 0 && allocated + step <= cap {
            let scope = device.push_error_scope(ErrorFilter::OutOfMemory);
            let buffer = device.create_buffer(&BufferDescriptor {
                label: None,
                size: step,
                usage: BufferUsages::STORAGE | BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut encoder = device.create_command_encoder(&Default::default());
            encoder.clear_buffer(&buffer, 0, None);
            queue.submit([encoder.finish()]);
            let polled = device.poll(PollType::wait_indefinitely());
            if let Some(error) = futures_lite::future::block_on(scope.pop()) {
                failure = Some(error.to_string());
                break;
            }
            if let Err(e) = polled {
                failure = Some(e.to_string());
                break;
            }
            buffers.push(buffer);
            allocated += step;
        }
        drop(buffers);
        match failure {
            Some(error) => MemoryFigure::known(
                allocated,
                format!(
                    "allocation probe: {} in {} MiB steps before an allocation failed ({error})",
                    human(allocated),
                    step >> 20
                ),
            ),
            None => MemoryFigure::at_least(
                allocated,
                format!(
                    "allocation probe: at least {}, stopped at its cap ({why})",
                    human(allocated)
                ),
            ),
        }
    }
}
