//! Measures real training steps on the device to fit the memory and speed models: the
//! planner predicts from what this device did, not from a table.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::memory::{HalfCost, LinearCost, MeasuredCost, MemoryModel};
use super::search::SpeedModel;
use crate::backend::{BackendError, BackendKind, Target};
use crate::checkpoint::new_optimizer;
use crate::memory::MemoryMeter;
use crate::model::{ModelConfig, Patches};
pub use crate::planned::StepMeasurement;
use crate::precision::Precision;
use crate::step::{StepError, StepSettings, optimizer_step};

/// Patches per micro-batch of the two calibration steps. Far enough apart for a slope, small
/// enough to fit the smallest budgets the planner serves (about 100 MiB on a CPU).
pub const CALIBRATION_PATCHES: [usize; 2] = [4, 16];

/// Relative margin on every memory prediction. Allocator peaks vary slightly from step to
/// step (under 1% on flex once the process is warm), and a prediction must err high.
pub const MEMORY_MARGIN: f64 = 0.02;

#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("a calibration step failed: {0}")]
    Step(#[from] StepError),
    #[error(
        "nothing measures memory on {0} in this build, so the planner cannot calibrate; \
         train without a plan and choose the split yourself (trainer-cli train --no-plan \
         --batch-size N --gradient-accumulation-steps K)"
    )]
    Unmeasured(BackendKind),
}

/// Runs a warm-up step (AdamW creates its moments in the first) and a measured one, with
/// `patches` random patches per micro-batch, on a model of its own that is dropped after.
pub fn measure_step<C: ModelConfig>(
    target: Target,
    model: &C,
    patches: usize,
    precision: Precision,
    checkpointing: bool,
) -> Result<StepMeasurement, CalibrationError> {
    let device = target.training_device(checkpointing)?;
    let mut meter = MemoryMeter::new(target.backend, &device);
    if meter.source() == crate::memory::MemorySource::Unmeasured {
        return Err(CalibrationError::Unmeasured(target.backend));
    }
    meter.cleanup();
    let before = meter.sample().allocated_bytes;
    let measurement = {
        device.seed(7);
        let mut net = model.init(&device);
        let mut optimizer = new_optimizer();
        let settings = StepSettings {
            step_patches: patches,
            lr: 1e-4,
            clip_norm: Some(1.0),
            warming_up: false,
            precision,
        };
        let mut seconds = 0.0;
        let mut peak = 0;
        // The warm-up step makes AdamW's moments; on a GPU it also compiles and tunes the
        // kernels for this size, so it runs at full size there. A CPU compiles nothing, and
        // one patch is enough.
        let warm_up = if target.backend.is_host() { 1 } else { patches };
        for round in 0..2 {
            let size = if round == 0 { warm_up } else { patches };
            let batch = Patches::random(model.input(), model.classes(), size, &device);
            meter.reset_peak();
            let started = Instant::now();
            let settings = StepSettings {
                step_patches: size,
                ..settings
            };
            let (next, _) = optimizer_step(net, &mut optimizer, [batch], settings, &mut meter)?;
            net = next;
            let _ = device.sync();
            if round == 1 {
                seconds = started.elapsed().as_secs_f64();
                peak = meter.sample().peak_bytes;
            }
        }
        StepMeasurement {
            patches,
            checkpointing,
            precision,
            peak_bytes: peak.saturating_sub(before),
            seconds,
        }
    };
    meter.cleanup();
    Ok(measurement)
}

/// What calibration measured and the models fitted to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub backend: BackendKind,
    pub memory: MemoryModel,
    pub speed: SpeedModel,
    pub measurements: Vec<StepMeasurement>,
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
/// the device's half precision without.
pub fn calibrate<C: ModelConfig>(
    target: Target,
    model: &C,
) -> Result<Calibration, CalibrationError> {
    let [small, large] = CALIBRATION_PATCHES;
    // The first step in a process also sets up what stays for its life (thread pools, kernel
    // caches); measured, that would count as the step's own cost.
    measure_step(target, model, 1, Precision::F32, false)?;
    let mut variants = vec![(Precision::F32, false), (Precision::F32, true)];
    if let Some(half) = half_precision(target)? {
        variants.push((half, false));
    }
    let mut measurements = Vec::with_capacity(2 * variants.len());
    for (precision, checkpointing) in variants {
        for patches in [small, large] {
            measurements.push(measure_step(
                target,
                model,
                patches,
                precision,
                checkpointing,
            )?);
        }
    }
    Ok(fit(target.backend, measurements))
}

/// Fits the models to measurements, a line per precision and checkpointing.
pub fn fit(backend: BackendKind, measurements: Vec<StepMeasurement>) -> Calibration {
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
    let bytes = |ms: &[&StepMeasurement]| {
        (!ms.is_empty())
            .then(|| MeasuredCost::new(ms.iter().map(|m| (m.patches, m.peak_bytes as f64))))
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
        measurements,
    }
}
