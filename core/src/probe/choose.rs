//! The `--backend auto` policy: the fastest place that fits, never a software adapter over
//! flex, explained in one line.

use super::{DeviceClass, DeviceReport, MachineReport, gib};
use crate::backend::BackendKind;

/// Free memory a GPU must have for auto to pick it. The default model's smallest training
/// step measured 6.5 MB of pool memory on wgpu (micro-batch of one patch), so this leaves
/// ample room for the driver and other programs; the planner (issue 4) will replace it with
/// the estimate of the smallest plan.
pub const MIN_FREE_BYTES: u64 = 512 << 20;

#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub backend: BackendKind,
    /// The probed device, when the choice is one.
    pub device: Option<DeviceReport>,
    pub reason: String,
}

fn rank(d: &DeviceReport) -> u8 {
    match (d.backend, d.class) {
        (BackendKind::Cuda, _) => 0,
        (_, DeviceClass::DiscreteGpu) => 1,
        (_, DeviceClass::IntegratedGpu) => 2,
        (_, DeviceClass::VirtualGpu) => 3,
        _ => 4,
    }
}

/// Picks where to train from a probe report.
pub fn choose(report: &MachineReport) -> Choice {
    let mut passed_over = Vec::new();
    let mut candidates: Vec<&DeviceReport> = Vec::new();
    for d in &report.devices {
        if d.class == DeviceClass::Cpu {
            continue;
        }
        if matches!(d.class, DeviceClass::SoftwareAdapter | DeviceClass::Other) {
            // One adapter often shows up once per API (Vulkan, GL): say it once.
            let line = format!("{} is a {} (CPU-type)", d.name, d.class.label());
            if !passed_over.contains(&line) {
                passed_over.push(line);
            }
        } else if !d.usable {
            passed_over.push(format!("{} is not usable in this build", d.name));
        } else if d
            .free_memory
            .bytes
            .is_some_and(|free| free < MIN_FREE_BYTES)
        {
            passed_over.push(format!(
                "{} has only {} free",
                d.name,
                gib(d.free_memory.bytes.unwrap_or(0))
            ));
        } else {
            candidates.push(d);
        }
    }
    // Most free memory first within the fastest kind of device.
    candidates.sort_by_key(|d| (rank(d), std::cmp::Reverse(d.free_memory.bytes.unwrap_or(0))));
    if let Some(best) = candidates.first() {
        let free = best.free_memory.bytes.map_or_else(
            || "free memory unknown".to_string(),
            |b| format!("{} free", gib(b)),
        );
        let mut reason = format!(
            "auto: {} {} ({}, {free})",
            best.backend,
            best.name,
            best.class.label()
        );
        if best.backend != BackendKind::Cuda
            && let Some(cuda) = report.findings.iter().find(|f| f.contains("CUDA"))
        {
            reason.push_str(&format!(" - {cuda}"));
        }
        return Choice {
            backend: best.backend,
            device: Some((*best).clone()),
            reason,
        };
    }

    let cpu = report
        .devices
        .iter()
        .find(|d| d.class == DeviceClass::Cpu && d.usable)
        .cloned();
    let backend = cpu.as_ref().map_or(BackendKind::Flex, |d| d.backend);
    let mut why: Vec<String> = report
        .findings
        .iter()
        .filter(|f| f.starts_with("no ") || f.contains("failed") || f.contains("did not"))
        .map(|f| f.split(':').next().unwrap_or(f).to_string())
        .collect();
    why.extend(passed_over);
    if why.is_empty() {
        why.push("no GPU found".to_string());
    }
    let free = cpu
        .as_ref()
        .and_then(|d| d.free_memory.bytes)
        .map_or_else(String::new, |b| format!(", {} RAM free", gib(b)));
    Choice {
        backend,
        reason: format!("auto: {backend} (CPU{free}) - {}", why.join("; ")),
        device: cpu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{MemoryFigure, Precision};

    fn device(
        backend: BackendKind,
        name: &str,
        class: DeviceClass,
        free: Option<u64>,
    ) -> DeviceReport {
        DeviceReport {
            backend,
            selector: String::new(),
            name: name.into(),
            class,
            api: String::new(),
            total_memory: MemoryFigure::unknown("test"),
            free_memory: free.map_or_else(
                || MemoryFigure::unknown("test"),
                |b| MemoryFigure::known(b, "test"),
            ),
            precisions: vec![Precision::F32],
            max_allocation_bytes: None,
            usable: true,
            notes: vec![],
        }
    }

    fn machine(mut devices: Vec<DeviceReport>, findings: &[&str]) -> MachineReport {
        devices.push(device(
            BackendKind::Flex,
            "CPU",
            DeviceClass::Cpu,
            Some(16 << 30),
        ));
        MachineReport {
            devices,
            findings: findings.iter().map(|s| s.to_string()).collect(),
            elapsed_ms: 0,
        }
    }

    #[test]
    fn a_software_adapter_never_wins_over_flex() {
        let report = machine(
            vec![device(
                BackendKind::Wgpu,
                "llvmpipe (LLVM 15.0.6, 256 bits)",
                DeviceClass::SoftwareAdapter,
                Some(20 << 30),
            )],
            &["no CUDA device or driver: NVML did not load (libnvidia-ml.so: cannot open)"],
        );
        let choice = choose(&report);
        assert_eq!(choice.backend, BackendKind::Flex);
        assert!(
            choice.reason.contains("no CUDA device or driver"),
            "{}",
            choice.reason
        );
        assert!(
            choice.reason.contains("llvmpipe") && choice.reason.contains("software adapter"),
            "{}",
            choice.reason
        );
    }

    #[test]
    fn cuda_beats_a_discrete_wgpu_adapter_and_full_gpus_are_passed_over() {
        let report = machine(
            vec![
                device(
                    BackendKind::Wgpu,
                    "Radeon",
                    DeviceClass::DiscreteGpu,
                    Some(8 << 30),
                ),
                device(
                    BackendKind::Cuda,
                    "RTX 3070 Laptop",
                    DeviceClass::DiscreteGpu,
                    Some(6 << 30),
                ),
                device(
                    BackendKind::Cuda,
                    "busy A100",
                    DeviceClass::DiscreteGpu,
                    Some(100 << 20),
                ),
            ],
            &[],
        );
        let choice = choose(&report);
        assert_eq!(choice.backend, BackendKind::Cuda);
        assert!(
            choice.reason.contains("RTX 3070 Laptop") && choice.reason.contains("6.0 GiB free"),
            "{}",
            choice.reason
        );
    }

    #[test]
    fn an_integrated_gpu_is_chosen_when_there_is_no_cuda() {
        let report = machine(
            vec![device(
                BackendKind::Wgpu,
                "Intel Iris Xe",
                DeviceClass::IntegratedGpu,
                Some(6 << 30),
            )],
            &["no CUDA device or driver: NVML did not load"],
        );
        let choice = choose(&report);
        assert_eq!(choice.backend, BackendKind::Wgpu);
        assert!(
            choice
                .reason
                .starts_with("auto: wgpu Intel Iris Xe (integrated GPU, 6.0 GiB free)"),
            "{}",
            choice.reason
        );
    }
}
