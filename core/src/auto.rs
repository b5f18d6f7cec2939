//! The `--backend auto` policy: the fastest place that fits, never a software adapter over
//! flex, explained in one line.

use crate::backend::{BackendKind, Target};
use crate::model::VqAutoencoderConfig;
use crate::model::vq_patch_ae::StepForms;
use crate::plan::memory;
use crate::probe::{DeviceClass, DeviceReport, MachineReport};
#[cfg(not(target_arch = "wasm32"))]
use crate::registry::{BuiltIn, WithTask, with_default};
use crate::size::gib;

/// Free memory a GPU must have for auto to consider it: twice the analytic size of the
/// model's smallest step (one patch per micro-batch; parameters, gradients, AdamW moments,
/// activations, as burn's layers keep them), about 17 MB for the default model. The
/// measured smallest steps: on wgpu 6.2 MiB in use, 20.9 MiB reserved by the pool (its
/// first pages); on flex under 20 MiB. The dry-run on the device has the last word.
pub fn minimum_free_bytes(model: &VqAutoencoderConfig) -> u64 {
    let b = memory::breakdown(model.analytic_with(StepForms::Plain, 1), 0, 0, 0);
    2 * (b.parameters + b.gradients + b.optimizer + b.activations + b.data)
}

#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub backend: BackendKind,
    /// The probed device, when the choice is one.
    pub device: Option<DeviceReport>,
    pub reason: String,
    /// GPUs that fit, best first; the quick benchmark decides among them and the CPU.
    pub candidates: Vec<DeviceReport>,
    /// The CPU device auto falls back to.
    pub cpu: Option<DeviceReport>,
}

impl Choice {
    pub fn target(&self) -> Target {
        Target {
            backend: self.backend,
            device: self.device.as_ref().and_then(|d| d.target),
        }
    }
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

/// Picks where to train from a probe report, by kind of device and free memory; see
/// [`decide`] for the measured choice among several.
pub fn choose(report: &MachineReport) -> Choice {
    let minimum = minimum_free_bytes(&VqAutoencoderConfig::default());
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
        } else if d.free_memory.bytes.is_some_and(|free| free < minimum) {
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
            candidates: candidates.iter().map(|d| (*d).clone()).collect(),
            cpu: cpu_device(report),
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
        device: cpu.clone(),
        candidates: Vec::new(),
        cpu,
    }
}

fn cpu_device(report: &MachineReport) -> Option<DeviceReport> {
    report
        .devices
        .iter()
        .find(|d| d.class == DeviceClass::Cpu && d.usable)
        .cloned()
}

/// GPUs the quick benchmark tries at most, best-ranked first.
pub const MAX_TRIALS: usize = 3;

/// The measured choice: when a GPU fits, a few real training steps on each candidate (up to
/// [`MAX_TRIALS`] GPUs) and on the CPU decide, by patches per second. A candidate whose
/// trial fails is passed over with its error, so a GPU that cannot run the step falls back.
/// `trial` runs the steps; it is a parameter so the policy can be tested without devices.
pub fn decide(
    choice: Choice,
    mut trial: impl FnMut(&DeviceReport) -> Result<f64, String>,
) -> Choice {
    let Some(cpu) = choice.cpu.clone() else {
        return choice;
    };
    if choice.candidates.is_empty() {
        return choice;
    }
    let mut results: Vec<(DeviceReport, Result<f64, String>)> = choice
        .candidates
        .iter()
        .take(MAX_TRIALS)
        .chain(std::iter::once(&cpu))
        .map(|d| (d.clone(), trial(d)))
        .collect();
    let cpu_rate = results.last().and_then(|(_, r)| r.as_ref().ok().copied());
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(d, r)| {
            r.as_ref()
                .err()
                .map(|e| format!("{} {} failed its trial step ({e})", d.backend, d.name))
        })
        .collect();
    results.retain(|(_, r)| r.is_ok());
    let best = results
        .iter()
        .max_by(|a, b| {
            let (ra, rb) = (a.1.as_ref().unwrap_or(&0.0), b.1.as_ref().unwrap_or(&0.0));
            ra.total_cmp(rb)
        })
        .map(|(d, r)| (d.clone(), *r.as_ref().unwrap_or(&0.0)));
    let Some((winner, rate)) = best else {
        // Nothing ran, the CPU included: keep the kind-based choice and say so.
        let mut choice = choice;
        choice.reason = format!("{}; {}", choice.reason, failures.join("; "));
        return choice;
    };
    let free = winner.free_memory.bytes.map_or_else(
        || "free memory unknown".to_string(),
        |b| format!("{} free", gib(b)),
    );
    let mut reason = if winner.class == DeviceClass::Cpu {
        format!(
            "auto: {} (CPU, {free}, {rate:.0} patches/s)",
            winner.backend
        )
    } else {
        format!(
            "auto: {} {} ({}, {free}, {rate:.0} patches/s)",
            winner.backend,
            winner.name,
            winner.class.label()
        )
    };
    let mut why = Vec::new();
    if winner.class != DeviceClass::Cpu
        && let Some(cpu_rate) = cpu_rate.filter(|r| *r > 0.0)
    {
        why.push(format!(
            "{} would be {:.1}x slower by the quick benchmark",
            cpu.backend,
            rate / cpu_rate
        ));
    }
    for (d, r) in &results {
        if *d != winner && d.class != DeviceClass::Cpu {
            why.push(format!(
                "{} {}: {:.0} patches/s",
                d.backend,
                d.name,
                r.as_ref().unwrap_or(&0.0)
            ));
        }
    }
    why.extend(failures);
    if !why.is_empty() {
        reason.push_str(" - ");
        reason.push_str(&why.join("; "));
    }
    Choice {
        backend: winner.backend,
        device: Some(winner),
        reason,
        candidates: choice.candidates,
        cpu: choice.cpu,
    }
}

/// `--backend auto` as every native front-end runs it: [`choose`] from the probe report,
/// then, where a GPU fits, [`decide`] by timing a few steps of the built-in model `model` on
/// each candidate and on the CPU ([`quick_benchmark`]).
#[cfg(not(target_arch = "wasm32"))]
pub fn resolve(report: &MachineReport, model: &str) -> Choice {
    decide(choose(report), |device| quick_benchmark(device, model))
}

/// The trial [`decide`] runs by default: two training steps of the built-in model `model`
/// (the one the run will train) on the device, at its larger calibration size (16 patches
/// for the default model), the first also compiling kernels, timed on the second. Native: a
/// web page has one GPU at most, and no thread to block while it is timed.
#[cfg(not(target_arch = "wasm32"))]
pub fn quick_benchmark(device: &DeviceReport, model: &str) -> Result<f64, String> {
    struct Trial(Target);
    impl WithTask for Trial {
        type Output = Result<f64, String>;
        fn run<T: BuiltIn>(self, model: T) -> Self::Output {
            let [_, patches] = crate::plan::calibration_patches(&model, self.0.backend);
            crate::readback::block_on(crate::plan::measure_step(
                self.0,
                &model,
                patches,
                crate::precision::Precision::F32,
                false,
            ))
            .map(|m| patches as f64 / m.seconds.max(1e-9))
            .map_err(|e| e.to_string())
        }
    }
    let target = Target {
        backend: device.backend,
        device: device.target,
    };
    with_default(model, Trial(target)).map_err(|e| e.to_string())?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::Precision;
    use crate::probe::MemoryFigure;

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
            target: None,
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
                    Some(10 << 20),
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
        let names: Vec<&str> = choice.candidates.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            ["RTX 3070 Laptop", "Radeon"],
            "the busy A100 does not fit"
        );
    }

    #[test]
    fn an_a100_beats_a_laptop_gpu_and_a_crashed_probe_leaves_flex() {
        let report = machine(
            vec![
                device(
                    BackendKind::Cuda,
                    "RTX 3070 Laptop",
                    DeviceClass::DiscreteGpu,
                    Some(7 << 30),
                ),
                device(
                    BackendKind::Cuda,
                    "A100-SXM4-80GB",
                    DeviceClass::DiscreteGpu,
                    Some(79 << 30),
                ),
            ],
            &[],
        );
        assert!(choose(&report).reason.contains("A100"));

        let crashed = machine(
            vec![],
            &["GPU probe failed: the GPU probe crashed (signal: 11), a driver fault"],
        );
        let choice = choose(&crashed);
        assert_eq!(choice.backend, BackendKind::Flex);
        assert!(
            choice.reason.contains("GPU probe failed"),
            "{}",
            choice.reason
        );
        assert!(choice.candidates.is_empty());
    }

    fn two_gpus_and_the_cpu() -> Choice {
        choose(&machine(
            vec![
                device(
                    BackendKind::Wgpu,
                    "Radeon RX 6600",
                    DeviceClass::DiscreteGpu,
                    Some(7 << 30),
                ),
                device(
                    BackendKind::Wgpu,
                    "Intel Iris Xe",
                    DeviceClass::IntegratedGpu,
                    Some(6 << 30),
                ),
            ],
            &["no CUDA device or driver: NVML did not load"],
        ))
    }

    /// The trial times the model the run will train, and names a model it does not know.
    #[test]
    fn the_quick_benchmark_times_the_named_model() {
        let cpu = crate::probe::cpu::probe()
            .into_iter()
            .find(|d| d.backend == BackendKind::Flex)
            .expect("a CPU device");
        let rate = quick_benchmark(&cpu, "dcase-ae").unwrap();
        assert!(rate.is_finite() && rate > 0.0, "{rate}");
        let err = quick_benchmark(&cpu, "resnet").unwrap_err();
        assert!(err.contains("resnet") && err.contains("dcase-ae"), "{err}");
    }

    #[test]
    fn the_quick_benchmark_decides_among_candidates_and_says_by_how_much() {
        let choice = decide(two_gpus_and_the_cpu(), |d| {
            Ok(match d.name.as_str() {
                "Radeon RX 6600" => 310.0,
                "Intel Iris Xe" => 400.0,
                _ => 100.0,
            })
        });
        assert_eq!(choice.device.as_ref().unwrap().name, "Intel Iris Xe");
        assert!(
            choice
                .reason
                .contains("flex would be 4.0x slower by the quick benchmark"),
            "{}",
            choice.reason
        );
        assert!(
            choice.reason.contains("Radeon RX 6600: 310 patches/s"),
            "{}",
            choice.reason
        );
    }

    #[test]
    fn a_gpu_that_fails_its_trial_falls_back_with_the_reason() {
        let choice = decide(two_gpus_and_the_cpu(), |d| match d.class {
            DeviceClass::Cpu => Ok(70.0),
            _ => Err(format!("{}: out of memory", d.name)),
        });
        assert_eq!(choice.backend, BackendKind::Flex);
        assert!(
            choice
                .reason
                .contains("Radeon RX 6600 failed its trial step")
                && choice
                    .reason
                    .contains("Intel Iris Xe failed its trial step"),
            "{}",
            choice.reason
        );
    }

    #[test]
    fn the_cpu_alone_needs_no_benchmark() {
        let report = machine(vec![], &["no CUDA device or driver: NVML did not load"]);
        let choice = decide(choose(&report), |_| panic!("nothing to compare"));
        assert_eq!(choice.backend, BackendKind::Flex);
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
