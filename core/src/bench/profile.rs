//! `trainer-cli bench --profile`: where a training step of the default model spends its
//! time, op by op.
//!
//! Method. Each op runs alone on the training device with the shapes it has in a step of
//! `n` patches (a layer with the ReLU that follows it in the model): once to warm up, then `reps` times, and the median counts. Forward is the
//! layer's own call, as the model makes it. Backward is timed on `(y * g).sum()` twice:
//! once with only the layer's parameters requiring gradients (weight and bias) and once
//! with its input too; the input's gradient is the difference, and the backward of the
//! `(y * g).sum()` around it is measured on its own and taken off. The optimizer (global-norm
//! clipping and AdamW) is timed on real gradients. The whole step is timed as `bench` does;
//! what the ops do not explain (ReLU, the loss, the straight-through sum, gradient
//! bookkeeping, allocation) is the rest. Every timing syncs the device, so lazy backends
//! report work done, not queued.

use web_time::Instant;

use burn::tensor::{Device, Distribution, Tensor};
use serde::{Deserialize, Serialize};

use super::{BenchConfig, BenchError, median};
use crate::checkpoint::new_optimizer;
use crate::memory::MemoryMeter;
use crate::model::Patches;
use crate::model::layers::{conv, up};
use crate::model::{LayerForms, VqAutoencoder, VqAutoencoderConfig};
use crate::readback::block_on;
use crate::step::{StepError, clip_global_norm, micro_batch_gradients, optimizer_step};
use crate::task::StepContext;

/// One op's median time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpTime {
    /// The model's stage: `enc1` ... `out`, `quantizer`, `optimizer`, `rest`.
    pub stage: String,
    /// `forward`, `backward input`, `backward weight`, `step`.
    pub op: String,
    pub ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Profile {
    pub backend: String,
    pub threads: usize,
    /// Patches per step.
    pub patches: usize,
    pub step_ms: f64,
    pub ops: Vec<OpTime>,
}

/// A layer and whether the model follows it with a ReLU (timed with it).
enum Layer<'a> {
    Conv(&'a burn::nn::conv::Conv2d, bool),
    Up(&'a burn::nn::conv::ConvTranspose2d),
}

impl Layer<'_> {
    fn forward(&self, x: Tensor<4>, forms: LayerForms) -> Tensor<4> {
        match self {
            Layer::Conv(layer, relu) => conv(layer, x, None, forms, *relu),
            Layer::Up(layer) => up(layer, x, None, forms, true),
        }
    }
}

/// Median milliseconds of `reps` runs of `f` after one warm-up; `f` returns the time of
/// the part it measures.
fn timed(reps: usize, mut f: impl FnMut() -> f64) -> f64 {
    f();
    let mut times: Vec<f64> = (0..reps.max(1)).map(|_| f()).collect();
    median(&mut times) * 1e3
}

fn since(started: Instant, device: &Device) -> f64 {
    let _ = device.sync();
    started.elapsed().as_secs_f64()
}

fn random(shape: [usize; 4], device: &Device) -> Tensor<4> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

/// Seconds of the backward of `(y * g).sum()` where `y = f(x)`.
fn backward_of(f: &dyn Fn(Tensor<4>) -> Tensor<4>, x: Tensor<4>, device: &Device) -> f64 {
    let y = f(x);
    let g = random(y.dims(), device);
    let loss = (y * g).sum();
    let _ = device.sync();
    let started = Instant::now();
    let grads = loss.backward();
    let seconds = since(started, device);
    drop(grads);
    seconds
}

fn layers(model: &VqAutoencoder, n: usize) -> Vec<(&'static str, Layer<'_>, [usize; 4])> {
    vec![
        ("enc1", Layer::Conv(&model.enc1, true), [n, 1, 64, 64]),
        ("enc2", Layer::Conv(&model.enc2, true), [n, 32, 32, 32]),
        ("enc3", Layer::Conv(&model.enc3, true), [n, 64, 16, 16]),
        ("latent", Layer::Conv(&model.latent, false), [n, 96, 8, 8]),
        ("dec1", Layer::Up(&model.dec1), [n, 64, 8, 8]),
        ("dec2", Layer::Up(&model.dec2), [n, 96, 16, 16]),
        ("dec3", Layer::Up(&model.dec3), [n, 64, 32, 32]),
        ("out", Layer::Conv(&model.out, false), [n, 32, 64, 64]),
    ]
}

/// Profiles one step of `config.micro_batch * config.n_patches` patches (no accumulation)
/// with `config.steps` repetitions per op.
pub fn profile(config: &BenchConfig, threads: usize) -> Result<Profile, BenchError> {
    let device = config
        .backend
        .training_device(config.device, config.checkpointing)?;
    device.seed(config.seed);
    let model = VqAutoencoderConfig::default()
        .init(&device)
        .with_forms(config.forms());
    let n = config.split().patches_per_micro_batch();
    let reps = config.steps;
    let mut ops = Vec::new();
    let mut push = |stage: &str, op: &str, ms: f64| {
        ops.push(OpTime {
            stage: stage.into(),
            op: op.into(),
            ms,
        })
    };

    for (stage, layer, shape) in layers(&model, n) {
        let forward = timed(reps, || {
            let x = random(shape, &device);
            let _ = device.sync();
            let started = Instant::now();
            let y = layer.forward(x, model.forms());
            let seconds = since(started, &device);
            drop(y);
            seconds
        });
        let out_shape = layer.forward(random(shape, &device), model.forms()).dims();
        let identity = |x: Tensor<4>| x;
        let around = timed(reps, || {
            backward_of(
                &identity,
                random(out_shape, &device).require_grad(),
                &device,
            )
        });
        let f = |x: Tensor<4>| layer.forward(x, model.forms());
        let weight = timed(reps, || backward_of(&f, random(shape, &device), &device));
        push(stage, "forward", forward);
        push(stage, "backward weight", (weight - around).max(0.0));
        // The patches need no gradient: the first layer never computes its input's.
        if stage != "enc1" {
            let both = timed(reps, || {
                backward_of(&f, random(shape, &device).require_grad(), &device)
            });
            push(stage, "backward input", (both - weight).max(0.0));
        }
    }

    let latent_shape = [n, 64, 8, 8];
    let quantize = timed(reps, || {
        let latent = random(latent_shape, &device);
        let _ = device.sync();
        let started = Instant::now();
        let out = model.quantize(&latent);
        let seconds = since(started, &device);
        drop(out);
        seconds
    });
    let quantized = |x: Tensor<4>| model.quantize(&x).0;
    let around = timed(reps, || {
        backward_of(
            &|x| x,
            random(latent_shape, &device).require_grad(),
            &device,
        )
    });
    let quantize_back = timed(reps, || {
        backward_of(&quantized, random(latent_shape, &device), &device)
    });
    push("quantizer", "forward", quantize);
    push("quantizer", "backward", (quantize_back - around).max(0.0));

    let mut optimizer = new_optimizer();
    let mut meter = MemoryMeter::new(config.backend, &device);
    let mut model = model;
    let optimizer_ms = {
        let mut times = Vec::new();
        for _ in 0..=reps {
            let (mut grads, _, _) = block_on(micro_batch_gradients(
                &VqAutoencoderConfig::default(),
                &model,
                0,
                Patches::unlabelled(random([n, 1, 64, 64], &device)),
                n,
                StepContext {
                    precision: config.precision,
                    warming_up: false,
                },
                &mut meter,
            ))?;
            let _ = device.sync();
            let started = Instant::now();
            block_on(clip_global_norm(&model, &mut grads, 1.0)).map_err(StepError::from)?;
            model = optimizer.step(1e-3, model, grads);
            times.push(since(started, &device));
        }
        times.remove(0);
        median(&mut times) * 1e3
    };
    push("optimizer", "clip + AdamW", optimizer_ms);

    let settings = config.step_settings(n);
    let mut times = Vec::new();
    for rep in 0..=reps {
        let batch = Patches::unlabelled(random([n, 1, 64, 64], &device));
        let _ = device.sync();
        let started = Instant::now();
        let (next, _) = block_on(optimizer_step(
            &VqAutoencoderConfig::default(),
            model,
            &mut optimizer,
            [batch],
            settings,
            &mut meter,
        ))?;
        model = next;
        let seconds = since(started, &device);
        if rep > 0 {
            times.push(seconds);
        }
    }
    let step_ms = median(&mut times) * 1e3;
    let explained: f64 = ops.iter().map(|o| o.ms).sum();
    ops.push(OpTime {
        stage: "rest".into(),
        op: "step minus the ops above".into(),
        ms: step_ms - explained,
    });
    Ok(Profile {
        backend: config.backend.name().into(),
        threads,
        patches: n,
        step_ms,
        ops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_is_timed_and_the_rest_closes_the_step() {
        let config = BenchConfig::tiny_flex(2);
        let profile = profile(&config, 1).unwrap();
        // 8 layers x (forward, weight, input) less enc1's input, 2 quantizer, optimizer, rest.
        assert_eq!(profile.ops.len(), 8 * 3 - 1 + 2 + 1 + 1);
        assert!(profile.step_ms > 0.0);
        for op in profile.ops.iter().filter(|o| o.op == "forward") {
            assert!(op.ms > 0.0, "{op:?}");
        }
        assert!(profile.ops.iter().all(|o| o.ms.is_finite()), "{profile:?}");
    }
}
