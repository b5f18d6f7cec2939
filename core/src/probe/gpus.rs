//! The GPU half of the probe: NVIDIA GPUs through NVML (loaded at run time, so it works
//! without the `cuda` feature), and every adapter wgpu enumerates, with free memory from
//! Vulkan's memory-budget extension where the adapter is Vulkan. Meant to run in a child
//! process (see [`super::isolate`]).

use super::{DeviceClass, DeviceReport, GpuReport, MemoryFigure, Precision};
use crate::backend::BackendKind;

pub fn probe_here() -> GpuReport {
    let mut report = GpuReport::default();
    nvidia(&mut report);
    adapters(&mut report);
    report
}

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
            notes,
        });
    }
}

#[cfg(not(feature = "wgpu"))]
fn adapters(report: &mut GpuReport) {
    report
        .findings
        .push("wgpu adapters not probed: the wgpu backend is not in this build".to_string());
}

#[cfg(feature = "wgpu")]
fn adapters(report: &mut GpuReport) {
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
    let budgets = vulkan::heaps();
    for (index, adapter) in adapters.iter().enumerate() {
        let info = adapter.get_info();
        let class = match info.device_type {
            DeviceType::DiscreteGpu => DeviceClass::DiscreteGpu,
            DeviceType::IntegratedGpu => DeviceClass::IntegratedGpu,
            DeviceType::VirtualGpu => DeviceClass::VirtualGpu,
            DeviceType::Cpu => DeviceClass::SoftwareAdapter,
            DeviceType::Other => DeviceClass::Other,
        };
        let api = format!("{:?}", info.backend);
        let mut precisions = vec![Precision::F32];
        if adapter.features().contains(Features::SHADER_F16) {
            precisions.push(Precision::F16);
        }
        let heap = (info.backend == wgpu::Backend::Vulkan)
            .then(|| {
                budgets
                    .iter()
                    .find(|h| h.vendor == info.vendor && h.device == info.device)
            })
            .flatten();
        let (total, free) = match heap {
            Some(h) => (h.total.clone(), h.free.clone()),
            None => (
                MemoryFigure::unknown(format!("{api} reports no memory size here")),
                MemoryFigure::unknown(format!("{api} reports no free memory here")),
            ),
        };
        let mut notes = Vec::new();
        if class == DeviceClass::SoftwareAdapter {
            notes.push(
                "runs on the CPU: slower than flex, never chosen by --backend auto".to_string(),
            );
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
            max_allocation_bytes: Some(adapter.limits().max_buffer_size),
            usable: true,
            notes,
        });
    }
}

/// Device-local memory of Vulkan devices, with free memory from `VK_EXT_memory_budget`.
#[cfg(feature = "wgpu")]
mod vulkan {
    use super::MemoryFigure;

    pub struct Heap {
        pub vendor: u32,
        pub device: u32,
        pub total: MemoryFigure,
        pub free: MemoryFigure,
    }

    #[cfg(target_os = "macos")]
    pub fn heaps() -> Vec<Heap> {
        Vec::new()
    }

    #[cfg(not(target_os = "macos"))]
    pub fn heaps() -> Vec<Heap> {
        query().unwrap_or_default()
    }

    #[cfg(not(target_os = "macos"))]
    fn query() -> Option<Vec<Heap>> {
        use ash::vk;

        // SAFETY: plain Vulkan queries on an instance created and destroyed here; every
        // structure passed is initialised by ash's builders.
        unsafe {
            let entry = ash::Entry::load().ok()?;
            let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_1);
            let instance = entry
                .create_instance(
                    &vk::InstanceCreateInfo::default().application_info(&app),
                    None,
                )
                .ok()?;
            let mut heaps = Vec::new();
            for physical in instance.enumerate_physical_devices().unwrap_or_default() {
                let properties = instance.get_physical_device_properties(physical);
                let has_budget = instance
                    .enumerate_device_extension_properties(physical)
                    .unwrap_or_default()
                    .iter()
                    .any(|e| e.extension_name_as_c_str() == Ok(c"VK_EXT_memory_budget"));
                let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
                let mut memory = vk::PhysicalDeviceMemoryProperties2::default();
                if has_budget {
                    memory = memory.push_next(&mut budget);
                }
                instance.get_physical_device_memory_properties2(physical, &mut memory);
                let props = memory.memory_properties;
                let local: Vec<usize> = (0..props.memory_heap_count as usize)
                    .filter(|&i| {
                        props.memory_heaps[i]
                            .flags
                            .contains(vk::MemoryHeapFlags::DEVICE_LOCAL)
                    })
                    .collect();
                let total: u64 = local.iter().map(|&i| props.memory_heaps[i].size).sum();
                let free = if has_budget {
                    let free: u64 = local
                        .iter()
                        .map(|&i| budget.heap_budget[i].saturating_sub(budget.heap_usage[i]))
                        .sum();
                    MemoryFigure::known(free, "Vulkan VK_EXT_memory_budget")
                } else {
                    MemoryFigure::unknown("the Vulkan driver lacks VK_EXT_memory_budget")
                };
                heaps.push(Heap {
                    vendor: properties.vendor_id,
                    device: properties.device_id,
                    total: MemoryFigure::known(total, "Vulkan device-local heaps"),
                    free,
                });
            }
            instance.destroy_instance(None);
            Some(heaps)
        }
    }
}
