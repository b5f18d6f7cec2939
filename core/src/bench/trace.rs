//! `trainer-cli bench --memory-trace`: the memory of one training step, stage by stage.
//!
//! Method. A warm-up step at full size compiles the device's kernels and makes AdamW's
//! moments; then the device pool returns its cached memory, and one step runs with a
//! reading after each stage of the forward (`enc1` ... `out`), after the loss, after
//! backward and after the optimizer. Each reading syncs the device first. A reading gives
//! the bytes in use and, on a device pool, the bytes reserved (the pool keeps what it
//! reserved until told to return it, so reserved is the high-water so far); on the host,
//! the allocator's peak since the previous reading. What autodiff keeps for backward is
//! what stays in use through the forward; the step's peak is the largest reserved (GPU) or
//! peak (CPU) figure.

use burn::tensor::{Distribution, Tensor};
use serde::{Deserialize, Serialize};

use super::{BenchConfig, BenchError};
use crate::checkpoint::new_optimizer;
use crate::memory::{MemoryMeter, MemorySource};
use crate::model::Patches;
use crate::model::VqAutoencoderConfig;
use crate::readback::block_on;
use crate::step::{StepError, optimizer_step};

/// One reading.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryStage {
    /// `start`, `input`, `enc1` ... `out`, `loss`, `backward`, `optimizer`.
    pub stage: String,
    pub in_use_bytes: u64,
    /// Device pools: bytes reserved. `None` on the host.
    pub reserved_bytes: Option<u64>,
    /// Host: the allocator's peak since the previous reading. Device pools: the footprint
    /// so far (the largest of in use and reserved).
    pub peak_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryTrace {
    pub backend: String,
    /// `auto` or `plain` (`--plain-layers`).
    pub forms: String,
    pub patches: usize,
    pub source: MemorySource,
    pub stages: Vec<MemoryStage>,
}

pub fn memory_trace(config: &BenchConfig) -> Result<MemoryTrace, BenchError> {
    let device = config
        .backend
        .training_device(config.device, config.checkpointing)?;
    device.seed(config.seed);
    let task = VqAutoencoderConfig {
        forms: config.forms(),
        ..VqAutoencoderConfig::default()
    };
    let mut model = task.init(&device);
    let mut optimizer = new_optimizer();
    let mut meter = MemoryMeter::new(config.backend, &device);
    let n = config.split().patches_per_micro_batch();
    let random = || {
        Patches::unlabelled(Tensor::<4>::random(
            [n, 1, 64, 64],
            Distribution::Normal(0.0, 1.0),
            &device,
        ))
    };
    let settings = config.step_settings(n);
    let (warm, _) = block_on(optimizer_step(
        &task,
        model,
        &mut optimizer,
        [random()],
        settings,
        &mut meter,
    ))?;
    model = warm;
    meter.cleanup();
    let _ = device.sync();
    meter.reset_peak();

    let mut stages = Vec::new();
    let mut read = |stage: &str, meter: &mut MemoryMeter| {
        // A failed sync shows up as the step's error below; a reading needs the work done.
        let _ = device.sync();
        let r = meter.sample();
        stages.push(MemoryStage {
            stage: stage.into(),
            in_use_bytes: r.allocated_bytes,
            reserved_bytes: r.reserved_bytes,
            peak_bytes: r.peak_bytes,
        });
        if meter.source() == MemorySource::HostAllocator {
            meter.reset_peak();
        }
    };
    read("start", &mut meter);
    let patches = random().values;
    read("input", &mut meter);
    let compute = config.precision.compute_dtype();
    let output = {
        let meter = &mut meter;
        model.forward_observed(patches.clone(), compute, &mut |stage| read(stage, meter))
    };
    let loss = model.losses(patches, &output).total;
    drop(output);
    read("loss", &mut meter);
    let grads = loss.backward();
    device
        .sync()
        .map_err(|error| StepError::Device(error.to_string()))?;
    read("backward", &mut meter);
    let grads = burn::optim::GradientsParams::from_grads(grads, &model);
    let model = optimizer.step(1e-3, model, grads);
    read("optimizer", &mut meter);
    drop(model);
    Ok(MemoryTrace {
        backend: config.backend.name().into(),
        forms: if config.plain_layers { "plain" } else { "auto" }.into(),
        patches: n,
        source: meter.source(),
        stages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading after every stage, in order. What the readings show is tested through the
    /// CLI (`tests/cli_bench.rs`), each trace in a process of its own: on the host the
    /// counter sees the whole process, and this binary's other tests allocate alongside.
    #[test]
    fn every_stage_is_read_in_order() {
        let config = BenchConfig::tiny_flex(2);
        let trace = memory_trace(&config).unwrap();
        let names: Vec<&str> = trace.stages.iter().map(|s| s.stage.as_str()).collect();
        assert_eq!(
            names,
            [
                "start",
                "input",
                "enc1",
                "enc2",
                "enc3",
                "latent",
                "quantizer",
                "dec1",
                "dec2",
                "dec3",
                "out",
                "loss",
                "backward",
                "optimizer"
            ]
        );
        assert_eq!((trace.patches, trace.forms.as_str()), (2, "auto"));
        assert!(trace.stages.iter().all(|s| s.reserved_bytes.is_none()));
    }
}
