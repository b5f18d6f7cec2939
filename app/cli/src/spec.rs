//! The run a command's flags ask for, as core's [`RunSpec`]: each flag onto one field, so
//! that `train` and `plan` ask core for the same run, and the rest (the configuration, the
//! planner's request, the budget's source, what a resumed run may change) is core's.

use anyhow::{Context, Result};
use headroom_core::RunLength;
use headroom_core::size::parse_size;
use headroom_core::spec::{BudgetSpec, DataSpec, MemorySpec, RunSpec, SplitSpec};

use crate::args::{DataArgs, MemoryArgs, PlanArgs, SplitArgs, TrainArgs};

fn memory(args: &MemoryArgs) -> Result<MemorySpec> {
    let budget = match (&args.memory_budget, &args.simulate_device) {
        (Some(text), _) => BudgetSpec::Given {
            bytes: parse_size(text).context("--memory-budget")?,
        },
        (None, Some(device)) => BudgetSpec::Simulated {
            device: device.clone(),
        },
        (None, None) => BudgetSpec::FreeMemory,
    };
    Ok(MemorySpec {
        budget,
        fraction: args.memory_fraction,
        effective_batch: args.effective_batch,
        checkpointing: args.checkpointing(),
        precision: args.precision,
    })
}

fn split(args: &SplitArgs) -> SplitSpec {
    SplitSpec {
        micro_batch: args.batch_size,
        n_patches: args.n_patches,
        accumulation: args.gradient_accumulation_steps,
        ..SplitSpec::default()
    }
}

fn data(args: &DataArgs, machine_ids: Option<u32>, train_clips_per_id: Option<usize>) -> DataSpec {
    let features = &args.features;
    DataSpec {
        root: args.data_root.clone(),
        machine_type: args.machine_type.clone(),
        n_mels: features.n_mels,
        sample_rate: features.sample_rate,
        resample: features.resample,
        machine_ids,
        train_clips_per_id,
        // The built-in dataset's test split keeps its size on the command line.
        test_clips_per_id: None,
        speech: args
            .speech_train
            .clone()
            .map(|train| headroom_core::speech::SpeechFiles {
                train,
                validation: args.speech_validation.clone(),
                test: args.speech_test.clone(),
            }),
    }
}

impl TrainArgs {
    pub fn spec(&self) -> Result<RunSpec> {
        Ok(RunSpec {
            model: self.model.clone(),
            asr_size: self.asr_size.map(Into::into),
            gan_size: self.gan_size.map(Into::into),
            classifier: self.classifier.spec(),
            negatives: self.classifier.negatives.map(Into::into),
            data: data(&self.data, self.machine_ids, self.train_clips_per_id),
            split: SplitSpec {
                stride: self.stride,
                placement: self.placement.map(Into::into),
                ..split(&self.split)
            },
            memory: memory(&self.memory)?,
            planner: !self.no_plan,
            length: self
                .steps
                .map(RunLength::Steps)
                .or(self.epochs.map(RunLength::Epochs)),
            lr: self.lr,
            clip_norm: self.clip_norm,
            seed: self.seed,
            checkpoint_every: self.checkpoint_every,
            validate_every: self.validate_every,
            empty_cache_every: self.empty_cache_every,
        })
    }
}

impl PlanArgs {
    pub fn spec(&self) -> Result<RunSpec> {
        Ok(RunSpec {
            model: self.model.clone(),
            data: data(&self.data, self.machine_ids, self.train_clips_per_id),
            split: split(&self.split),
            memory: memory(&self.memory)?,
            asr_size: self.asr_size.map(Into::into),
            gan_size: self.gan_size.map(Into::into),
            classifier: self.classifier.spec(),
            negatives: self.classifier.negatives.map(Into::into),
            ..RunSpec::default()
        })
    }
}
