//! Measures real training steps on the device to fit the memory and speed models: the
//! planner predicts from what this device did, not from a table.

use web_time::Instant;

use serde::{Deserialize, Serialize};

use super::memory::{HalfCost, LinearCost, MeasuredCost, MemoryModel};
use super::search::SpeedModel;
use crate::backend::{BackendError, BackendKind, Target};
pub use crate::events::planned::StepMeasurement;
use crate::events::planned::{PagedStep, PhaseMeasurement};
use crate::memory::MemoryMeter;
use crate::precision::Precision;
use crate::readback::{self, LocalFuture};
use crate::setting::{Described, PlainWords, Setting, Wording};
use crate::split::Split;
use crate::step::{StepError, StepSettings, optimizer_step, phased_step};
use crate::task::TrainingTask;

/// Patches per micro-batch of the two calibration steps for a model whose patches the
/// analytic sizes do not describe, and the fewest the larger step takes for any model.
pub const CALIBRATION_PATCHES: [usize; 2] = [4, 16];

/// What the larger calibration step's patches hold, by the model's analytic sizes
/// (activations and input). A step's peak is a fixed part (parameters, gradients, AdamW's
/// moments, the backend's buffers) and a part per patch, and the calibration must see the
/// second: the default model's 16 patches hold 33 MiB, but 16 of dcase-ae's 640-value frame
/// stacks hold 0.3 MiB, under the noise of its 5 MiB fixed part, and planning thousands of
/// stacks from them fell 1.7-5.2x short (docs/BENCHMARKS-HISTORY.md).
pub const CALIBRATION_BYTES: u64 = 16 << 20;

/// The two calibration sizes for a model: the larger holds [`CALIBRATION_BYTES`] of
/// per-patch memory (at least 16 patches, at most 65,536), the smaller a quarter of it.
/// A task whose one example is large says its own ([`TrainingTask::calibration_examples`]).
pub fn calibration_patches<T: TrainingTask>(task: &T, backend: BackendKind) -> [usize; 2] {
    if let Some(sizes) = task.calibration_examples() {
        return sizes;
    }
    let [_, fewest] = CALIBRATION_PATCHES;
    let step = task.step_memory(backend, Precision::F32, fewest);
    let per_patch = (step.activations + step.data) / fewest as u64;
    let large = match CALIBRATION_BYTES.checked_div(per_patch) {
        Some(n) => (n as usize).clamp(fewest, 1 << 16),
        None => fewest,
    };
    [large / 4, large]
}

/// Relative margin on every memory prediction. Allocator peaks vary slightly from step to
/// step (under 1% on flex once the process is warm), and a prediction must err high.
pub const MEMORY_MARGIN: f64 = 0.02;

#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("a calibration step failed: {0}")]
    Step(#[from] StepError),
    #[error("{}", self.describe(&PlainWords))]
    Unmeasured(BackendKind),
}

impl Described for CalibrationError {
    fn describe(&self, words: &dyn Wording) -> String {
        match self {
            CalibrationError::Unmeasured(backend) => format!(
                "nothing measures memory on {backend} in this build, so the planner cannot \
                 calibrate; train with {} and choose {} and {} yourself",
                words.setting(Setting::PlannerOff),
                words.setting(Setting::MicroBatch),
                words.setting(Setting::Accumulation),
            ),
            other => other.to_string(),
        }
    }
}

/// Runs a warm-up step (AdamW creates its moments in the first) and a measured one, with
/// `patches` random patches per micro-batch, on a model of its own that is dropped after.
pub fn measure_step<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
    patches: usize,
    precision: Precision,
    checkpointing: bool,
) -> LocalFuture<'a, Result<StepMeasurement, CalibrationError>> {
    Box::pin(async move {
        measure_accumulating_step(target, task, patches, 1, precision, checkpointing).await
    })
}

/// As [`measure_step`], with `micro_batches` micro-batches of `patches` in the measured step
/// (a plan's dry-run: from the second micro-batch on, the gradients summed so far are held).
pub fn measure_accumulating_step<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
    patches: usize,
    micro_batches: usize,
    precision: Precision,
    checkpointing: bool,
) -> LocalFuture<'a, Result<StepMeasurement, CalibrationError>> {
    Box::pin(async move {
        let cut = Cut::even(task, patches, micro_batches);
        measure_cut_step(target, task, &cut, precision, checkpointing).await
    })
}

/// How a measured step cuts its examples: each phase's micro-batch (patches), over
/// `step_examples` examples in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub phase_patches: Vec<usize>,
    pub step_examples: usize,
}

impl Cut {
    /// Every phase in `micro_batches` micro-batches of `patches`.
    pub fn even<T: TrainingTask>(task: &T, patches: usize, micro_batches: usize) -> Self {
        let patches = patches.max(1);
        Self::of_step(task, patches, patches * micro_batches.max(1))
    }

    /// Every phase in micro-batches of `patches` over a step of `step_examples` (at least
    /// one micro-batch), the last micro-batch the remainder.
    pub fn of_step<T: TrainingTask>(task: &T, patches: usize, step_examples: usize) -> Self {
        let patches = patches.max(1);
        Self {
            phase_patches: vec![patches; task.phases().len()],
            step_examples: step_examples.max(patches),
        }
    }

    /// Each phase in micro-batches of its own size (`phase_patches`, the task's order),
    /// over as many examples as every phase's first two micro-batches need (at most the
    /// step's `effective` examples): the second holds the gradients summed so far, as a
    /// run's step does, a phase that does not accumulate takes one, and a smaller phase
    /// takes as many as the same examples make.
    pub fn per_phase(phase_patches: Vec<usize>, accumulating: &[bool], effective: usize) -> Self {
        let step_examples = phase_patches
            .iter()
            .zip(accumulating)
            .map(|(&p, &acc)| p.max(1) * if acc { 2 } else { 1 })
            .max()
            .unwrap_or(1)
            .min(effective.max(1));
        Self {
            phase_patches,
            step_examples,
        }
    }

    /// Phase `phase`'s micro-batch sizes: whole micro-batches, the last one the remainder
    /// (a step's split, in examples).
    fn sizes(&self, phase: usize) -> Vec<usize> {
        Split::of_step(self.step_examples, self.phase_patches[phase], 1).micro_batch_sizes()
    }
}

/// A measured step cut as `cut` says ([`Cut`]), on a model of its own dropped after: a
/// warm-up step, then the measured one, each phase's peak measured apart.
pub fn measure_cut_step<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
    cut: &'a Cut,
    precision: Precision,
    checkpointing: bool,
) -> LocalFuture<'a, Result<StepMeasurement, CalibrationError>> {
    Box::pin(async move {
        let device = target.training_device(checkpointing)?;
        let mut meter = MemoryMeter::new(target.backend, &device);
        if meter.source() == crate::memory::MemorySource::Unmeasured {
            return Err(CalibrationError::Unmeasured(target.backend));
        }
        let phases = task.phases().len();
        meter.cleanup();
        let before = meter.sample().allocated_bytes;
        let measurement = {
            device.seed(7);
            let mut net = task.networks(&device);
            let mut optimizer = task.optimizer();
            let settings = StepSettings {
                step_examples: cut.step_examples,
                lr: 1e-4,
                clip_norm: Some(1.0),
                warming_up: false,
                precision,
            };
            let mut seconds = 0.0;
            let (mut peak, mut pages, mut phase_peaks) = (0, None, Vec::new());
            // The warm-up step makes AdamW's moments; on a GPU it also compiles and tunes the
            // kernels for this size, so it runs at full size there. A CPU compiles nothing, and
            // one patch a phase is enough.
            let warm_up = if target.backend.is_host() {
                Cut::even(task, 1, 1)
            } else {
                cut.clone()
            };
            let page = |meter: &MemoryMeter| meter.current_pages().map(|pool| pool.page_bytes);
            let mut regrown = false;
            let mut round = 0;
            while round < 2 {
                let page_before = page(&meter);
                let this = if round == 0 { &warm_up } else { cut };
                let settings = StepSettings {
                    step_examples: this.step_examples,
                    ..settings
                };
                meter.reset_peak();
                let started = Instant::now();
                // The run keeps the model it had until the step succeeds (so that a step out of
                // memory can be redone smaller): its parameters are alive beside the new ones.
                let kept = net.clone();
                let (next, outcome) = if phases == 1 {
                    // Made one at a time inside the step, as the run reads its micro-batches.
                    let batches = this
                        .sizes(0)
                        .into_iter()
                        .map(|size| task.measuring_batch(size, &device));
                    optimizer_step(task, net, &mut optimizer, batches, settings, &mut meter).await?
                } else {
                    // A run's step holds its examples until its last phase: made up front here,
                    // each phase's own cut of random examples (memory does not depend on them).
                    let mut made: Vec<Vec<T::Batch>> = (0..phases)
                        .map(|phase| {
                            this.sizes(phase)
                                .into_iter()
                                .map(|size| task.measuring_batch(size, &device))
                                .collect()
                        })
                        .collect();
                    phased_step(
                        task,
                        net,
                        &mut optimizer,
                        |phase| std::mem::take(&mut made[phase]),
                        settings,
                        &mut meter,
                    )
                    .await?
                };
                drop(kept);
                net = next;
                // The step's scalars were read, so its work is done; this covers lazy backends.
                let _ = readback::settle(&device).await;
                // A warm-up that grew a paged pool's pages (cubecl) left the model's parameters
                // on the outgrown ones, held beside the new until a relocation empties them. A
                // run's model is made in the pages its planning grew: so is this one, made
                // again after the outgrown pages are returned, and warmed up again.
                if round == 0 && !regrown && page(&meter) != page_before {
                    regrown = true;
                    drop(net);
                    meter.cleanup();
                    device.seed(7);
                    net = task.networks(&device);
                    optimizer = task.optimizer();
                    continue;
                }
                if round == 1 {
                    seconds = started.elapsed().as_secs_f64();
                    peak = meter.sample().peak_bytes;
                    pages = meter.current_pages().map(|pool| PagedStep {
                        page_bytes: pool.page_bytes,
                        pages: pool.pages,
                        largest_allocation_bytes: pool.largest_allocation_bytes,
                        in_use_bytes: meter.in_use_peak().saturating_sub(before),
                    });
                    if phases > 1 {
                        phase_peaks = outcome
                            .phases
                            .iter()
                            .enumerate()
                            .map(|(phase, figures)| PhaseMeasurement {
                                patches: cut.phase_patches[phase],
                                micro_batches: cut.sizes(phase).len(),
                                peak_bytes: figures.peak_bytes.saturating_sub(before),
                                gradient_bytes: figures.gradient_bytes,
                            })
                            .collect();
                    }
                }
                round += 1;
            }
            StepMeasurement {
                patches: cut.phase_patches[0],
                checkpointing,
                precision,
                peak_bytes: peak.saturating_sub(before),
                seconds,
                micro_batches: cut.sizes(0).len(),
                frames: None,
                pages,
                phases: phase_peaks,
                step_examples: (!cut
                    .step_examples
                    .is_multiple_of(cut.phase_patches[0].max(1)))
                .then_some(cut.step_examples),
            }
        };
        meter.cleanup();
        Ok(measurement)
    })
}

/// What calibration measured and the models fitted to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub backend: BackendKind,
    pub memory: MemoryModel,
    pub speed: SpeedModel,
    pub measurements: Vec<StepMeasurement>,
    /// For a task planned by length: its steps' cost by length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lengths: Option<Box<super::length_model::LengthModel>>,
    /// A task of several phases: each phase's memory, fitted to its own peaks (the task's
    /// order); empty for one phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<MemoryModel>,
}

/// The half precision worth measuring on a device: bf16 on CUDA (f32's range, no loss
/// scale), else f16 where the device has it (wgpu's shaders have no bf16).
pub fn half_precision(target: Target) -> Result<Option<Precision>, CalibrationError> {
    let device = target.device()?;
    let order = if target.backend == BackendKind::Cuda {
        [Precision::Bf16, Precision::F16]
    } else {
        [Precision::F16, Precision::Bf16]
    };
    Ok(order.into_iter().find(|p| p.supported_on(&device)))
}

/// Six measured steps: two micro-batch sizes in f32 with and without checkpointing, and in
/// the device's half precision without (four for a task without mixed precision).
pub fn calibrate<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
) -> LocalFuture<'a, Result<Calibration, CalibrationError>> {
    Box::pin(async move {
        let mut variants = vec![(Precision::F32, false), (Precision::F32, true)];
        if task.mixed_precision()
            && let Some(half) = half_precision(target)?
        {
            variants.push((half, false));
        }
        calibrate_variants(target, task, &variants).await
    })
}

/// Two measured steps of the one kind a run takes: what re-fitting its micro-batch after an
/// out-of-memory needs (`MemoryModel::cost` of the run's precision and checkpointing), in a
/// third of a full calibration's steps. A half-precision checkpointed run has no such
/// measurement (the planner never picks one) and gets none.
pub fn calibrate_only<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
    precision: Precision,
    checkpointing: bool,
) -> LocalFuture<'a, Result<Calibration, CalibrationError>> {
    Box::pin(async move {
        let variants: &[(Precision, bool)] = if precision != Precision::F32 && checkpointing {
            &[]
        } else {
            &[(precision, checkpointing)]
        };
        calibrate_variants(target, task, variants).await
    })
}

fn calibrate_variants<'a, T: TrainingTask>(
    target: Target,
    task: &'a T,
    variants: &'a [(Precision, bool)],
) -> LocalFuture<'a, Result<Calibration, CalibrationError>> {
    Box::pin(async move {
        let [small, large] = calibration_patches(task, target.backend);
        // The first step in a process also sets up what stays for its life (thread pools, kernel
        // caches); measured, that would count as the step's own cost.
        if !variants.is_empty() {
            measure_step(target, task, 1, Precision::F32, false).await?;
        }
        let mut measurements = Vec::with_capacity(2 * variants.len());
        for &(precision, checkpointing) in variants {
            for patches in [small, large] {
                measurements
                    .push(measure_step(target, task, patches, precision, checkpointing).await?);
            }
        }
        // An accumulating step holds one set of summed gradients beyond a single micro-batch's
        // step: f32, one per trainable parameter.
        Ok(fit(target.backend, measurements, task.parameters() * 4))
    })
}

/// Fits the models to measurements, a line per precision and checkpointing; `gradient_bytes`
/// is what an accumulating step holds beyond one micro-batch's step (a measured step of two
/// micro-batches is read as one of its micro-batch's size plus these).
pub fn fit(
    backend: BackendKind,
    measurements: Vec<StepMeasurement>,
    gradient_bytes: u64,
) -> Calibration {
    let group = |precision: Precision, ckpt: bool| -> Vec<&StepMeasurement> {
        measurements
            .iter()
            .filter(|m| m.checkpointing == ckpt && m.precision == precision)
            .collect()
    };
    let pair = |ckpt: bool| group(Precision::F32, ckpt);
    let half_precision = measurements
        .iter()
        .map(|m| m.precision)
        .find(|p| *p != Precision::F32);
    let half = half_precision.map(|p| (p, group(p, false)));
    let line = |ms: &[&StepMeasurement], f: fn(&StepMeasurement) -> f64| match ms {
        [a, b, ..] => Some(LinearCost::fit((a.patches, f(a)), (b.patches, f(b)))),
        [a] => Some(LinearCost {
            fixed: f(a),
            per_patch: 0.0,
        }),
        [] => None,
    };
    let (plain, ckpt) = (pair(false), pair(true));
    let single_micro_batch = |m: &StepMeasurement| {
        let held = if m.micro_batches > 1 {
            gradient_bytes
        } else {
            0
        };
        (m.patches, m.peak_bytes.saturating_sub(held) as f64)
    };
    let bytes = |ms: &[&StepMeasurement]| {
        (!ms.is_empty()).then(|| MeasuredCost::new(ms.iter().map(|m| single_micro_batch(m))))
    };
    let secs = |m: &StepMeasurement| m.seconds;
    let memory = MemoryModel {
        plain: bytes(&plain).unwrap_or_default(),
        checkpointed: bytes(&ckpt),
        half: half.as_ref().and_then(|(p, ms)| {
            bytes(ms).map(|cost| HalfCost {
                precision: *p,
                cost,
            })
        }),
        accumulation_bytes: gradient_bytes,
        margin: MEMORY_MARGIN,
    };
    // A negative fixed time is noise on a nearly proportional cost, not a real speed-up of
    // small micro-batches; read it as proportional.
    let plain_time = line(&plain, secs).map_or(
        LinearCost {
            fixed: 1.0,
            per_patch: 0.0,
        },
        |t| LinearCost {
            fixed: t.fixed.max(0.0),
            per_patch: t.per_patch,
        },
    );
    // The ratio at the larger calibration size, where fixed costs weigh least.
    let checkpointing_factor = match (plain.last(), ckpt.last()) {
        (Some(p), Some(c)) if p.seconds > 0.0 => (c.seconds / p.seconds).max(1.0),
        _ => 1.25,
    };
    Calibration {
        backend,
        memory,
        speed: SpeedModel {
            micro_batch_s: plain_time,
            checkpointing_factor,
            half_s: half.as_ref().and_then(|(p, ms)| {
                line(ms, secs).map(|t| HalfCost {
                    precision: *p,
                    cost: LinearCost {
                        fixed: t.fixed.max(0.0),
                        per_patch: t.per_patch,
                    },
                })
            }),
        },
        phases: if measurements.iter().any(|m| m.pages.is_some()) {
            // A device pool's pages are shared by the phases: a phase's peak there is the
            // footprint so far, which the phases before it grew (each phase of a run read
            // the same footprint on lavapipe and the H200). Cut apart, the lighter phase's
            // larger micro-batch grows pages the heavier one's model never saw: seed 000's
            // GAN measured 4-11% over its per-phase predictions on the H200, and its
            // dry-runs never fitted (docs/BENCHMARKS.md). The phases take one cut there,
            // planned from the whole step's footprint, as every other model is.
            Vec::new()
        } else {
            phase_models(backend, &measurements, gradient_bytes)
        },
        measurements,
        lengths: None,
    }
}

/// Each phase's memory model, fitted to the phase's own peaks in `measurements` (none
/// when they were not measured by phase).
fn phase_models(
    backend: BackendKind,
    measurements: &[StepMeasurement],
    gradient_bytes: u64,
) -> Vec<MemoryModel> {
    let phases = measurements
        .iter()
        .map(|m| m.phases.len())
        .min()
        .unwrap_or(0);
    (0..phases)
        .map(|phase| {
            // A phase accumulates its own network's gradients, not every network's.
            let own_gradients = measurements
                .iter()
                .filter_map(|m| m.phases.get(phase))
                .map(|p| p.gradient_bytes)
                .max()
                .unwrap_or(gradient_bytes);
            let own = measurements.iter().filter_map(|m| m.phase(phase)).collect();
            fit(backend, own, own_gradients).memory
        })
        .collect()
}

/// Adds a measured step to the calibration's memory model (a step of a size already
/// measured replaces that point). Only memory learns: its timing is one step, not a fit.
pub fn learn(calibration: &mut Calibration, measured: StepMeasurement) {
    calibration.measurements.push(measured);
    let refitted = fit(
        calibration.backend,
        calibration.measurements.clone(),
        calibration.memory.accumulation_bytes,
    );
    calibration.memory = refitted.memory;
    calibration.phases = refitted.phases;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::dcase_ae::DcaseAeConfig;
    use crate::model::vq_patch_ae::VqAutoencoderConfig;

    /// The default model's calibration stays at 4 and 16 patches; a model of small patches
    /// calibrates at sizes whose per-patch memory shows above its fixed part.
    #[test]
    fn calibration_sizes_follow_the_size_of_a_patch() {
        for backend in [BackendKind::Flex, BackendKind::Wgpu] {
            let vq = calibration_patches(&VqAutoencoderConfig::default(), backend);
            let dcase = calibration_patches(&DcaseAeConfig::default(), backend);
            assert_eq!(vq, CALIBRATION_PATCHES);
            assert!(dcase[0] >= 128 && dcase[1] == 4 * dcase[0], "{dcase:?}");
        }
    }

    /// Two phases measured at 4 and 16 examples, the second's peak twice the first's; on a
    /// device pool (pages read) the same steps give no phase models, so the planner cuts
    /// the phases alike from the whole step's footprint.
    #[test]
    fn phases_get_their_own_models_on_a_host_and_share_a_cut_on_a_device_pool() {
        let step = |patches: usize, pages: Option<PagedStep>| StepMeasurement {
            patches,
            checkpointing: false,
            precision: Precision::F32,
            peak_bytes: 2_000 * patches as u64 + 10_000,
            seconds: 0.1,
            micro_batches: 1,
            frames: None,
            pages,
            phases: [1_000, 2_000]
                .map(|per| PhaseMeasurement {
                    patches,
                    micro_batches: 1,
                    peak_bytes: per * patches as u64 + 10_000,
                    gradient_bytes: 100,
                })
                .to_vec(),
            step_examples: None,
        };
        let host = fit(BackendKind::Flex, vec![step(4, None), step(16, None)], 200);
        assert_eq!(host.phases.len(), 2);
        let lighter = host.phases[0].plain.at(16);
        let heavier = host.phases[1].plain.at(16);
        assert!((lighter - 26_000.0).abs() < 1.0, "{lighter}");
        assert!((heavier - 42_000.0).abs() < 1.0, "{heavier}");
        let pages = PagedStep {
            page_bytes: 1 << 20,
            pages: 1,
            largest_allocation_bytes: 1_000,
            in_use_bytes: 40_000,
        };
        let pooled = fit(
            BackendKind::Wgpu,
            vec![step(4, Some(pages)), step(16, Some(pages))],
            200,
        );
        assert!(pooled.phases.is_empty());
    }
}
