//! A network of one's own, trained through Headroom's API: a small convolutional
//! autoencoder of 64-mel x 32-frame patches, defined here and not in Headroom, trained on
//! the built-in dataset with the planner choosing its micro-batch under a 256 MiB budget,
//! every event printed as a JSON line, the test split scored at the end.
//!
//! Run: `cargo run --release -p headroom-core --example own_model [STEPS]`
//! (docs/MODELS.md explains each piece; `cargo test` runs it through the test at its end).

use burn::module::Module;
use burn::nn::PaddingConfig2d;
use burn::nn::conv::{Conv2d, Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use headroom_core::backend::BackendKind;
use headroom_core::budget::Budget;
use headroom_core::events::EvaluationReport;
use headroom_core::events::Event;
use headroom_core::model::{
    AnalyticStep, ModelConfig, PatchShape, Patches, SpectrogramModel, StepLoss,
};
use headroom_core::plan::{Fixed, Planning};
use headroom_core::precision::Precision;
use headroom_core::train::{DatasetSource, Evaluation};
use headroom_core::{ModelTrainer, RunLength, RunOptions, TrainConfig, TrainError};
use headroom_datasets::SyntheticConfig;
use serde::{Deserialize, Serialize};

// On the CPU, Headroom measures memory by counting the process's allocations: a program that
// plans CPU runs installs the counter as its allocator, as trainer-cli does.
#[global_allocator]
static ALLOC: headroom_core::memory::alloc::CountingAllocator =
    headroom_core::memory::alloc::CountingAllocator(std::alloc::System);

/// The network's shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TinyAeConfig {
    pub channels: usize,
}

impl Default for TinyAeConfig {
    fn default() -> Self {
        Self { channels: 16 }
    }
}

#[derive(Module, Debug)]
pub struct TinyAe {
    down1: Conv2d,
    down2: Conv2d,
    up1: ConvTranspose2d,
    up2: ConvTranspose2d,
}

impl TinyAe {
    fn reconstruct(&self, x: Tensor<4>) -> Tensor<4> {
        let h = relu(self.down1.forward(x));
        let h = relu(self.down2.forward(h));
        let h = relu(self.up1.forward(h));
        self.up2.forward(h)
    }

    /// Each patch's mean squared reconstruction error, `[n]`.
    fn errors(&self, x: Tensor<4>) -> Tensor<1> {
        let [n, _, mels, frames] = x.dims();
        let error = (self.reconstruct(x.clone()) - x).square();
        error.reshape([n, mels * frames]).mean_dim(1).reshape([n])
    }
}

impl SpectrogramModel for TinyAe {
    type Config = TinyAeConfig;

    fn loss(&self, batch: Patches, _precision: Precision, _warming_up: bool) -> StepLoss {
        let loss = self.errors(batch.values).mean();
        StepLoss {
            total: loss.clone(),
            reported: loss,
        }
    }

    fn patch_scores(&self, batch: Patches) -> Tensor<1> {
        self.errors(batch.values)
    }
}

impl ModelConfig for TinyAeConfig {
    type Model = TinyAe;
    const NAME: &'static str = "tiny-ae";
    const SUMMARY: &'static str = "an example: a four-layer convolutional autoencoder";

    fn init(&self, device: &Device) -> TinyAe {
        let c = self.channels;
        let down = |i, o| {
            Conv2dConfig::new([i, o], [3, 3])
                .with_stride([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device)
        };
        let up = |i, o| {
            ConvTranspose2dConfig::new([i, o], [4, 4])
                .with_stride([2, 2])
                .with_padding([1, 1])
                .init(device)
        };
        TinyAe {
            down1: down(1, c),
            down2: down(c, 2 * c),
            up1: up(2 * c, c),
            up2: up(c, 1),
        }
    }

    fn input(&self) -> PatchShape {
        PatchShape {
            mels: 64,
            frames: 32,
        }
    }

    fn parameter_count(&self) -> u64 {
        let c = self.channels as u64;
        let layer = |i: u64, o: u64, k: u64| i * o * k * k + o;
        layer(1, c, 3) + layer(c, 2 * c, 3) + layer(2 * c, c, 4) + layer(c, 1, 4)
    }

    fn analytic_step(&self, _: BackendKind, _: Precision, patches: usize) -> AnalyticStep {
        let c = self.channels as u64;
        let (p, area) = (patches as u64, 64 * 32);
        // Each hidden output and its ReLU's input, the reconstruction and its error.
        let per_patch = 2 * (c * area / 4 + 2 * c * area / 16 + c * area / 4) + 2 * area;
        AnalyticStep {
            parameters: 4 * self.parameter_count(),
            activations: 4 * p * per_patch,
            data: 4 * p * area,
        }
    }
}

/// Trains `TinyAe` for `steps` steps on a small built-in dataset under a 256 MiB budget on
/// flex, printing each event, and scores the test split.
pub fn train(steps: u64, print: bool) -> Result<(Vec<Event>, EvaluationReport), TrainError> {
    let mut config = TrainConfig {
        backend: BackendKind::Flex,
        length: RunLength::Steps(steps),
        dataset: DatasetSource::Synthetic(SyntheticConfig {
            machine_ids: 2,
            train_per_id: 12,
            test_normal_per_id: 6,
            test_anomaly_per_id: 6,
            ..SyntheticConfig::default()
        }),
        ..TrainConfig::default()
    };
    config.set_model(&TinyAeConfig::default());
    let budget = 256 << 20;
    let options = RunOptions {
        planning: Some(Planning {
            budget_bytes: budget,
            effective_batch: 64,
            fixed: Fixed::default(),
            // The planner's preference among patch counts that tie: 4.
            preferred_n_patches: None,
            // Examples of one size: no plan by length.
            length_timing: None,
        }),
        budget: Some(Budget::new(budget)),
        ..RunOptions::default()
    };
    let mut trainer = ModelTrainer::<TinyAe>::new(config, options)?;
    let mut events = Vec::new();
    trainer.run(&mut |event: Event| {
        if print {
            println!("{}", serde_json::to_string(&event).unwrap_or_default());
        }
        events.push(event);
    })?;
    // A model's run scores anomalies; another kind of training reports its own results.
    let report = match trainer.evaluate()? {
        Evaluation::Anomaly { report, .. } => report,
        Evaluation::Results(results) => unreachable!("a model's run scores anomalies: {results:?}"),
    };
    Ok((events, report))
}

fn main() {
    let steps = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    match train(steps, true) {
        Ok((_, report)) => println!(
            "tiny-ae: mean AUC {:.3}, pAUC {:.3}",
            report.auc, report.pauc
        ),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}

/// The example trains through the public API: the planner chose its split under the budget
/// and the run stayed within it, its loss fell, and its test split was scored. Built by
/// `cargo test` as the example's own test (`test = true` in core/Cargo.toml): one build of
/// the example instead of one as an example and another inside a test binary.
#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::events;
    #[test]
    fn a_network_defined_outside_headroom_trains_within_its_plan() {
        let (events, report) = train(12, false).expect("the example trains");
        let plan = events::plan(&events)
            .map(|p| p.plan.clone())
            .expect("the run was planned");
        assert_eq!(plan.effective_batch, 64);
        assert!(plan.predicted_peak_bytes <= plan.budget_bytes);
        let steps = events::steps(&events);
        assert_eq!(steps.len(), 12);
        for step in &steps {
            assert!(
                step.mem_peak_bytes <= plan.budget_bytes,
                "step {} reached {} of {}",
                step.step,
                step.mem_peak_bytes,
                plan.budget_bytes
            );
        }
        let first: f64 = steps[..3].iter().map(|s| s.loss).sum();
        let last: f64 = steps[steps.len() - 3..].iter().map(|s| s.loss).sum();
        assert!(last < first, "the loss should fall: {first} -> {last}");
        assert_eq!(report.per_machine.len(), 2);
    }
}
