//! Video memory as the operating system's graphics API reports it: DXGI's video memory budget
//! on Windows, a Metal device's recommended working set on macOS, Vulkan's device-local heaps
//! and `VK_EXT_memory_budget` elsewhere. The probe (headroom-core's `probe`) matches these to
//! wgpu's adapters. A crate of its own so that CI compile-checks the Windows and macOS code
//! for those targets without building burn for them (.ci/run).

/// A figure in bytes, or why there is none; `source` says where it comes from either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figure {
    pub bytes: Option<u64>,
    pub source: String,
}

impl Figure {
    pub fn known(bytes: u64, source: impl Into<String>) -> Self {
        Self {
            bytes: Some(bytes),
            source: source.into(),
        }
    }

    pub fn unknown(reason: impl Into<String>) -> Self {
        Self {
            bytes: None,
            source: reason.into(),
        }
    }
}

/// One adapter's memory; it is named by PCI ids (DXGI, Vulkan) or by name (Metal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterMemory {
    pub vendor: Option<u32>,
    pub device: Option<u32>,
    pub name: Option<String>,
    pub total: Figure,
    pub free: Figure,
}

impl AdapterMemory {
    /// Whether this is the adapter with these PCI ids and name (as wgpu reports them).
    pub fn is(&self, vendor: u32, device: u32, name: &str) -> bool {
        match (self.vendor, self.device, &self.name) {
            (Some(v), Some(d), _) => v == vendor && d == device,
            (_, _, Some(own)) => own == name,
            _ => false,
        }
    }
}

/// DXGI's adapters on Windows, Metal's devices on macOS; elsewhere none.
#[cfg(windows)]
pub fn os_adapters() -> Vec<AdapterMemory> {
    use windows::Win32::Graphics::Dxgi::{
        CreateDXGIFactory1, DXGI_MEMORY_SEGMENT_GROUP_LOCAL, DXGI_QUERY_VIDEO_MEMORY_INFO,
        IDXGIAdapter3, IDXGIFactory1,
    };
    use windows::core::Interface;

    let mut found = Vec::new();
    // SAFETY: COM calls on objects DXGI created here, each checked for failure; the info
    // structure is a plain out-parameter owned by this frame.
    unsafe {
        let Ok(factory) = CreateDXGIFactory1::<IDXGIFactory1>() else {
            return found;
        };
        let mut index = 0;
        while let Ok(adapter) = factory.EnumAdapters1(index) {
            index += 1;
            let Ok(desc) = adapter.GetDesc1() else {
                continue;
            };
            let Ok(adapter3) = adapter.cast::<IDXGIAdapter3>() else {
                continue;
            };
            let mut info = DXGI_QUERY_VIDEO_MEMORY_INFO::default();
            let free = match adapter3.QueryVideoMemoryInfo(
                0,
                DXGI_MEMORY_SEGMENT_GROUP_LOCAL,
                &mut info,
            ) {
                Ok(()) => Figure::known(
                    info.Budget.saturating_sub(info.CurrentUsage),
                    "DXGI video memory budget",
                ),
                Err(e) => Figure::unknown(format!("DXGI: {e}")),
            };
            found.push(AdapterMemory {
                vendor: Some(desc.VendorId),
                device: Some(desc.DeviceId),
                name: None,
                total: Figure::known(
                    desc.DedicatedVideoMemory as u64,
                    "DXGI dedicated video memory",
                ),
                free,
            });
        }
    }
    found
}

/// DXGI's adapters on Windows, Metal's devices on macOS; elsewhere none.
#[cfg(target_os = "macos")]
pub fn os_adapters() -> Vec<AdapterMemory> {
    use objc2_metal::{MTLCopyAllDevices, MTLDevice};

    MTLCopyAllDevices()
        .iter()
        .map(|device| {
            let working_set = device.recommendedMaxWorkingSetSize();
            let allocated = device.currentAllocatedSize() as u64;
            AdapterMemory {
                vendor: None,
                device: None,
                name: Some(device.name().to_string()),
                total: Figure::known(working_set, "Metal recommended working set"),
                free: Figure::known(
                    working_set.saturating_sub(allocated),
                    "Metal recommended working set minus this process's allocations",
                ),
            }
        })
        .collect()
}

/// DXGI's adapters on Windows, Metal's devices on macOS; elsewhere none.
#[cfg(not(any(windows, target_os = "macos")))]
pub fn os_adapters() -> Vec<AdapterMemory> {
    Vec::new()
}

/// Device-local memory of the Vulkan devices, with free memory from `VK_EXT_memory_budget`;
/// none where Vulkan is not the way to the GPU (macOS, a web page) or has no driver.
#[cfg(any(target_os = "macos", target_arch = "wasm32"))]
pub fn vulkan_heaps() -> Vec<AdapterMemory> {
    Vec::new()
}

/// Device-local memory of the Vulkan devices, with free memory from `VK_EXT_memory_budget`;
/// none where Vulkan is not the way to the GPU (macOS, a web page) or has no driver.
#[cfg(not(any(target_os = "macos", target_arch = "wasm32")))]
pub fn vulkan_heaps() -> Vec<AdapterMemory> {
    query_vulkan().unwrap_or_default()
}

#[cfg(not(any(target_os = "macos", target_arch = "wasm32")))]
fn query_vulkan() -> Option<Vec<AdapterMemory>> {
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
                Figure::known(free, "Vulkan VK_EXT_memory_budget")
            } else {
                Figure::unknown("the Vulkan driver lacks VK_EXT_memory_budget")
            };
            heaps.push(AdapterMemory {
                vendor: Some(properties.vendor_id),
                device: Some(properties.device_id),
                name: None,
                total: Figure::known(total, "Vulkan device-local heaps"),
                free,
            });
        }
        instance.destroy_instance(None);
        Some(heaps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(vendor: Option<u32>, device: Option<u32>, name: Option<&str>) -> AdapterMemory {
        AdapterMemory {
            vendor,
            device,
            name: name.map(str::to_string),
            total: Figure::unknown("test"),
            free: Figure::unknown("test"),
        }
    }

    #[test]
    fn adapters_match_by_pci_ids_else_by_name() {
        let by_ids = memory(Some(0x10de), Some(0x2684), None);
        assert!(by_ids.is(0x10de, 0x2684, "anything"));
        assert!(!by_ids.is(0x10de, 0x2685, "anything"));
        let by_name = memory(None, None, Some("Apple M2"));
        assert!(by_name.is(0, 0, "Apple M2"));
        assert!(!by_name.is(0, 0, "Apple M3"));
        assert!(!memory(None, None, None).is(0, 0, ""));
    }
}
