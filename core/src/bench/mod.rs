//! `trainer-cli bench`: timed training steps of a model on random patches, the same measure
//! as its PyTorch reference (`shared/bench/reference_vqae.py` for the default model,
//! `bench/reference/` for the others) so the two compare side by side.

#[cfg(feature = "wgpu")]
mod launches;
mod profile;
mod trace;

#[cfg(feature = "wgpu")]
pub use launches::{KernelLaunches, Launches};
pub use profile::{OpTime, Profile, profile};
pub use trace::{MemoryStage, MemoryTrace, memory_trace};

use web_time::Instant;

use serde::{Deserialize, Serialize};

use crate::backend::{BackendError, BackendKind};
use crate::memory::MemoryMeter;
use crate::model::{LayerForms, NamedConfig, VqAutoencoderConfig};
use crate::readback::block_on;
use crate::split::Split;
use crate::step::{StepError, StepSettings, optimizer_step};
use crate::task::TrainingTask;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Step(#[from] StepError),
    /// A length asked of a task whose examples are all one size.
    #[error(
        "{model}'s examples are all one size: time it without a length (a length is for a \
         model whose examples vary in length, such as the speech recogniser)"
    )]
    FixedLength { model: String },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchConfig {
    pub backend: BackendKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<crate::backend::DeviceTarget>,
    /// Spectrograms per micro-batch (the reference's `--batch`).
    pub micro_batch: usize,
    pub n_patches: usize,
    pub accumulation: usize,
    /// Timed optimizer steps.
    pub steps: usize,
    pub warmup: usize,
    pub seed: u64,
    /// burn's balanced gradient checkpointing.
    #[serde(default)]
    pub checkpointing: bool,
    /// Encoder and decoder compute precision (mixed precision; f32 parameters).
    #[serde(default)]
    pub precision: crate::precision::Precision,
    /// burn's own convolutions instead of the CPU forms and kernels (for comparison).
    #[serde(default)]
    pub plain_layers: bool,
    /// For a task whose examples vary in length: each example's frames (the task's
    /// longest when `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<usize>,
}

impl BenchConfig {
    /// One step of `micro_batch` single patches on flex: the unit tests' configuration.
    #[cfg(test)]
    pub(crate) fn tiny_flex(micro_batch: usize) -> Self {
        Self {
            backend: BackendKind::Flex,
            device: None,
            micro_batch,
            n_patches: 1,
            accumulation: 1,
            steps: 1,
            warmup: 0,
            seed: 0,
            checkpointing: false,
            precision: Default::default(),
            plain_layers: false,
            frames: None,
        }
    }

    /// The step every bench mode runs: the reference script's learning rate and clipping.
    fn step_settings(&self, step_examples: usize) -> StepSettings {
        StepSettings {
            step_examples,
            lr: 1e-3,
            clip_norm: Some(1.0),
            warming_up: false,
            precision: self.precision,
        }
    }

    /// Each timed step's split (even: the bench has no step of another size).
    pub fn split(&self) -> Split {
        Split::even(self.micro_batch, self.n_patches, self.accumulation)
    }

    fn forms(&self) -> LayerForms {
        if self.plain_layers {
            LayerForms::Plain
        } else {
            LayerForms::Auto
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchResult {
    pub framework: String,
    pub backend: String,
    pub threads: usize,
    pub batch: usize,
    pub patches: usize,
    pub accum: usize,
    pub params: usize,
    pub steps: usize,
    pub step_ms_median: f64,
    pub patches_per_s: f64,
    /// Peak bytes during the timed steps: the host allocator's on CPU, the device pool's
    /// footprint (bytes reserved) on GPU.
    pub mem_peak_bytes: u64,
    /// Most bytes in use during the timed steps (on GPU, at the step's sample points);
    /// equal to `mem_peak_bytes` on CPU.
    #[serde(default)]
    pub mem_in_use_peak_bytes: u64,
    /// Peak resident set of the whole process, like the reference's `peak_rss_mib`.
    pub peak_rss_mib: Option<f64>,
    /// Each example's frames, where the task's examples vary in length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<usize>,
    /// A device pool's pages after the timed steps (empty on CPU backends).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<crate::memory::PoolPages>,
    /// Kernel launches a timed step issues on a cubecl device, over every kernel (none
    /// on CPU backends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launches_per_step: Option<f64>,
    /// Each kernel's launches over all the timed steps, most launched first.
    #[cfg(feature = "wgpu")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<KernelLaunches>,
}

/// Times the default model (in the layer forms `config` asks for).
pub fn run(config: &BenchConfig, threads: usize) -> Result<BenchResult, BenchError> {
    let model = VqAutoencoderConfig {
        forms: config.forms(),
        ..VqAutoencoderConfig::default()
    };
    run_model(&model, config, threads)
}

/// Times task `task` (a model: its patch task) on random micro-batches shaped as its data,
/// each example `config.frames` long where that is given.
pub fn run_model<T: TrainingTask + NamedConfig>(
    task: &T,
    config: &BenchConfig,
    threads: usize,
) -> Result<BenchResult, BenchError> {
    let at_length;
    let task = match config.frames {
        None => task,
        Some(frames) => {
            at_length = task
                .at_length(frames)
                .ok_or_else(|| BenchError::FixedLength {
                    model: T::NAME.to_string(),
                })?;
            &at_length
        }
    };
    let device = config
        .backend
        .training_device(config.device, config.checkpointing)?;
    device.seed(config.seed);
    let mut model = task.networks(&device);
    let params = burn::module::Module::num_params(&model);
    // The task's own optimizer, as its runs step (the GAN's Adam with beta1 0.5), so that
    // its PyTorch twin can time the same step.
    let mut optimizer = task.optimizer();
    let mut meter = MemoryMeter::new(config.backend, &device);
    let n = config.split().patches_per_micro_batch();
    let mut times = Vec::with_capacity(config.steps);
    let (mut peak, mut in_use_peak) = (0, 0);
    #[cfg(feature = "wgpu")]
    let mut launches = None;
    for step in 0..config.warmup + config.steps {
        if step == config.warmup {
            meter.reset_peak();
            #[cfg(feature = "wgpu")]
            if !config.backend.is_host() {
                launches = Some(Launches::start());
            }
        }
        let started = Instant::now();
        let batches = (0..config.accumulation).map(|_| task.measuring_batch(n, &device));
        let settings = config.step_settings(n * config.accumulation);
        let (next, _) = block_on(optimizer_step(
            task,
            model,
            &mut optimizer,
            batches,
            settings,
            &mut meter,
        ))?;
        model = next;
        // The step's scalars were read back, so its work is done; syncing covers lazy backends.
        let _ = device.sync();
        if step >= config.warmup {
            times.push(started.elapsed().as_secs_f64());
            peak = peak.max(meter.sample().peak_bytes);
            in_use_peak = in_use_peak.max(meter.in_use_peak());
        }
    }
    #[cfg(feature = "wgpu")]
    let kernels = launches.map(Launches::finish);
    #[cfg(feature = "wgpu")]
    let launches_per_step = kernels.as_ref().map(|kernels| {
        kernels.iter().map(|k| k.launches).sum::<u64>() as f64 / config.steps.max(1) as f64
    });
    #[cfg(not(feature = "wgpu"))]
    let launches_per_step = None;
    let median = median(&mut times);
    Ok(BenchResult {
        framework: "headroom".into(),
        backend: config.backend.name().into(),
        threads,
        batch: config.micro_batch,
        patches: config.n_patches,
        accum: config.accumulation,
        params,
        steps: config.steps,
        step_ms_median: median * 1e3,
        patches_per_s: (n * config.accumulation) as f64 / median,
        mem_peak_bytes: peak,
        mem_in_use_peak_bytes: in_use_peak,
        peak_rss_mib: peak_rss_mib(),
        frames: config.frames,
        pools: meter.pages(),
        launches_per_step,
        #[cfg(feature = "wgpu")]
        kernels: kernels.unwrap_or_default(),
    })
}

/// The middle value, or the mean of the two middle ones, as Python's `statistics.median`.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn peak_rss_mib() -> Option<f64> {
    crate::memory::host_peak_bytes().map(|b| b as f64 / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_matches_python() {
        assert_eq!(super::median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
