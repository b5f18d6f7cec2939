//! The CPU as a training device: cores, RAM (sysinfo) and SIMD level.

use sysinfo::{MemoryRefreshKind, RefreshKind, System};

use super::{DeviceClass, DeviceReport, MemoryFigure, Precision};
use crate::backend::BackendKind;

/// The widest vector extension the CPU reports, as the CPU backends can use it.
pub fn simd_level() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return "AVX-512";
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return "AVX2+FMA";
        }
        if std::arch::is_x86_feature_detected!("sse4.2") {
            return "SSE4.2";
        }
        "SSE2"
    }
    #[cfg(target_arch = "aarch64")]
    {
        "NEON"
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        "none detected"
    }
}

/// The CPU's model as it names itself ("AMD EPYC 7B13"), where it does.
pub fn brand() -> Option<String> {
    let cpus = System::new_with_specifics(
        RefreshKind::nothing().with_cpu(sysinfo::CpuRefreshKind::nothing()),
    );
    cpus.cpus()
        .first()
        .map(|c| c.brand().trim().to_string())
        .filter(|b| !b.is_empty())
}

/// Threads this process may run on: what the CPU backends' thread pools use.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPU as a run's device, in words: "CPU: AMD EPYC 7B13, 2 threads" (no parentheses of
/// its own: front-ends put it in theirs, "Backend flex (CPU: ...)").
pub fn describe() -> String {
    let threads = threads();
    let threads = format!("{threads} thread{}", if threads == 1 { "" } else { "s" });
    match brand() {
        Some(brand) => format!("CPU: {brand}, {threads}"),
        None => format!("CPU, {threads}"),
    }
}

/// One entry per CPU backend in this build; they share the CPU and its RAM.
pub fn probe() -> Vec<DeviceReport> {
    let system = System::new_with_specifics(
        RefreshKind::nothing().with_memory(MemoryRefreshKind::nothing().with_ram()),
    );
    let threads = threads();
    let cores = System::physical_core_count().unwrap_or(threads);
    let name = format!(
        "{} ({cores} cores, {threads} threads, {})",
        brand().unwrap_or_else(|| "CPU".to_string()),
        simd_level()
    );
    [BackendKind::Flex, BackendKind::Ndarray]
        .into_iter()
        .map(|backend| {
            let mut notes = Vec::new();
            if !backend.is_built() {
                notes.push(format!("not in this build (cargo feature `{backend}`)"));
            }
            if backend == BackendKind::Ndarray {
                notes.push("about 32x slower than flex for the default model".to_string());
            }
            DeviceReport {
                backend,
                selector: "cpu".to_string(),
                name: name.clone(),
                class: DeviceClass::Cpu,
                api: "CPU".to_string(),
                total_memory: MemoryFigure::known(system.total_memory(), "RAM (sysinfo)"),
                free_memory: MemoryFigure::known(
                    system.available_memory(),
                    "available RAM (sysinfo)",
                ),
                precisions: vec![Precision::F32],
                max_allocation_bytes: None,
                usable: backend.is_built(),
                target: None,
                notes,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cpu_reports_its_ram() {
        let devices = super::probe();
        assert_eq!(devices.len(), 2);
        let flex = &devices[0];
        let total = flex.total_memory.bytes.unwrap();
        let free = flex.free_memory.bytes.unwrap();
        assert!(
            total > 256 << 20 && free <= total,
            "total {total}, free {free}"
        );
        assert!(flex.usable);
    }

    #[test]
    fn the_cpu_is_described_in_words() {
        let words = super::describe();
        assert!(words.starts_with("CPU"), "{words}");
        assert!(
            words.ends_with(" thread") || words.ends_with(" threads"),
            "{words}"
        );
        assert!(
            !words.contains("Device<") && !words.contains("Flex"),
            "{words}"
        );
        if let Some(brand) = super::brand() {
            assert!(words.contains(&brand), "{words}");
        }
    }
}
