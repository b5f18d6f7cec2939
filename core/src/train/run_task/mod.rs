//! What the run loop asks of a kind of training beyond one optimizer step
//! ([`crate::task::TrainingTask`]): its data, opened and checked before the run is planned and
//! streamed as the plan splits each step; what happens when its warm-up ends; and what it
//! measures on held-out data. The loop ([`super::TaskTrainer`]), checkpoints and resume are
//! written against these two traits, so a new kind of training implements them in a module
//! of its own and trains, plans, recovers and resumes as the built-in models do.
//!
//! Every [`crate::model::ModelConfig`] is one ([`super::patches`]): patches of log-mel
//! spectrograms, the DCASE splits, anomaly scores.

use burn::tensor::Device;

use crate::config::TrainConfig;
use crate::data::{LoaderOptions, Normalization};
use crate::events::{DatasetReport, Picture};
use crate::lengths::LengthBuckets;
use crate::model::{DefaultBatch, ModelInfo, NamedConfig};
use crate::plan::ReadAhead;
use crate::readback::LocalFuture;
use crate::task::TrainingTask;

use super::{Evaluation, TrainError};

/// A kind of training as the run loop drives it: its configuration is what a checkpoint
/// records, under its name ([`NamedConfig`]).
pub trait RunTask: TrainingTask + NamedConfig + Sync {
    /// The run's data, as this task reads it.
    type Data: TaskData<Batch = Self::Batch>;

    /// Indexes the run's dataset, reading no example yet.
    fn open(
        self,
        config: &TrainConfig,
        loader: &LoaderOptions,
    ) -> Result<(Self, Self::Data), TrainError>;

    /// The task sized for a fresh run's checked data (a classifier's output for the
    /// dataset's classes); refuses data it cannot learn from. A resumed run keeps its saved
    /// task.
    fn for_data(self, _data: &Self::Data) -> Result<Self, TrainError> {
        Ok(self)
    }

    /// Warm-up steps for a run of `total_steps` when none were asked for; 0: none.
    fn default_warm_up_steps(&self, _total_steps: u64) -> u64 {
        0
    }

    /// The networks once the warm-up ends, given the run's data (`device`: the run's,
    /// without autodiff); `seed` makes any draw reproducible. Outside any step's time and
    /// memory window.
    fn end_warm_up<'a>(
        &'a self,
        networks: Self::Networks,
        _data: &'a Self::Data,
        _device: &'a Device,
        _seed: u64,
    ) -> LocalFuture<'a, Result<Self::Networks, TrainError>> {
        Box::pin(async move { Ok(networks) })
    }

    /// The mean loss over the validation split, without autodiff (`device`), in `batches`.
    fn validation_loss<'a>(
        &'a self,
        networks: &'a Self::Networks,
        data: &'a Self::Data,
        device: &'a Device,
        batches: &'a EvalBatches,
    ) -> LocalFuture<'a, Result<f64, TrainError>>;

    /// What the networks make now, as a picture with words on what it shows (a GAN's
    /// generated patches per class), drawn at every validation; `None` (the default) draws
    /// nothing.
    fn picture<'a>(
        &'a self,
        _networks: &'a Self::Networks,
        _data: &'a Self::Data,
        _device: &'a Device,
    ) -> LocalFuture<'a, Result<Option<(Picture, String)>, TrainError>> {
        Box::pin(async { Ok(None) })
    }

    /// What a step of `config`'s split means for the task, in a sentence, where the split
    /// changes what its loss computes (a contrastive loss's negatives); `None` (the
    /// default): a step is its examples, however cut.
    fn step_words(&self, _config: &TrainConfig) -> Option<String> {
        None
    }

    /// What the run is measured by on its test split, without autodiff (`device`), in
    /// `batches`; `skipped` lists files already left out.
    fn evaluate<'a>(
        &'a self,
        networks: &'a Self::Networks,
        data: &'a Self::Data,
        device: &'a Device,
        batches: &'a EvalBatches,
        skipped: Vec<String>,
    ) -> LocalFuture<'a, Result<Evaluation, TrainError>>;
}

/// How many held-out examples go to the device at once without autodiff: a training
/// micro-batch's worth, which a forward pass without autodiff holds in less memory than the
/// plan gave a training step; by length when the run's steps are.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalBatches {
    /// Examples at once (patches, for the patch task).
    pub examples: usize,
    pub by_length: Option<LengthBuckets>,
}

impl EvalBatches {
    /// The batches of a run of `config`.
    pub fn of(config: &TrainConfig) -> Self {
        Self {
            examples: config.split().patches_per_micro_batch().max(1),
            by_length: config.length_buckets.clone(),
        }
    }

    /// Batch sizes over examples of `lengths`, sorted ascending (any lengths without a
    /// length plan): packed by length, or `examples` at a time.
    pub fn sizes(&self, lengths: &[usize]) -> Vec<usize> {
        match &self.by_length {
            Some(buckets) => buckets.pack(lengths),
            None => {
                let n = lengths.len();
                let at_once = self.examples.max(1);
                (0..n.div_ceil(at_once))
                    .map(|i| at_once.min(n - i * at_once))
                    .collect()
            }
        }
    }
}

/// A kind of training front-ends can pick by name (`crate::registry`): what they list and
/// default to.
pub trait BuiltIn: RunTask {
    /// What `trainer-cli models` lists.
    fn info(&self) -> ModelInfo;

    /// A step when the user gives no batch settings.
    fn default_batch(&self) -> DefaultBatch;

    /// Makes `config` train this task with its defaults: its batch, the features its input
    /// takes, its strides.
    fn configure(&self, config: &mut TrainConfig);
}

/// A run's data: its splits, read lazily, and the train split as a stream whose positions
/// count examples in the order every run of the same seed draws them.
pub trait TaskData {
    /// What a micro-batch is on the device.
    type Batch;

    /// Reads every train and validation example once before the run is planned: leaves out
    /// (or fails on) bad files, and fits the input's normalization on the train split.
    fn check(&mut self) -> Result<(), TrainError>;

    /// Train examples in one epoch: the unit of the stream's positions and of a step's
    /// share of the data (a spectrogram for the patch task).
    fn train_examples(&self) -> usize;

    /// Validation examples (none: the run computes no validation loss).
    fn validation_examples(&self) -> usize;

    /// Test examples: what [`RunTask::evaluate`] measures.
    fn test_examples(&self) -> usize;

    /// Whether the examples stay in host memory once read: by default they do (data made
    /// or read whole before the run is planned).
    fn resident(&self) -> bool {
        true
    }

    /// What the stream holds in host memory while reading ahead for `config`'s split, as
    /// the planner counts it beside the step: by default nothing (examples already in host
    /// memory are in the resident bytes the planner measures).
    fn read_ahead(&self, _config: &TrainConfig, _loader: &LoaderOptions) -> ReadAhead {
        ReadAhead::NONE
    }

    /// (Re)starts the train stream for `config`'s split: after the plan, and after a
    /// recovery changed the micro-batch. By default there is nothing to start.
    fn stream(&mut self, _config: &TrainConfig, _loader: &LoaderOptions) {}

    /// For examples of every length (utterances): every train and validation example's
    /// length in frames, which the planner buckets (`crate::plan::lengths`). Empty (the
    /// default): every example is one size.
    fn lengths(&self) -> Vec<usize> {
        Vec::new()
    }

    /// The longest example (train or validation), named as a message names it (a file and
    /// its length): what a plan that cannot hold even one of it says. `None` by default.
    fn longest(&self) -> Option<String> {
        None
    }

    /// Leaves out every train and validation example longer than `frames` (one no plan
    /// within the budget can hold), listing each with the skipped files; how many. Called
    /// before the train stream starts, when bad files are left out rather than failed on.
    /// Nothing by default (every example is one size).
    fn leave_out_longer_than(&mut self, _frames: usize) -> usize {
        0
    }

    /// Lengths of the `count` examples from stream position `first` on, in the stream's
    /// order: a step's, which the loop packs into micro-batches by the run's length buckets
    /// (and reports the padding of, whatever the split). Once the split is by length
    /// ([`TrainConfig::length_buckets`]) the stream sorts each step's examples by length, so
    /// a micro-batch holds neighbours. Empty by default.
    fn lengths_at(&mut self, _first: u64, _count: usize) -> Vec<usize> {
        Vec::new()
    }

    /// `count` examples from stream position `first` on, on `device`: one micro-batch.
    fn micro_batch(
        &mut self,
        first: u64,
        count: usize,
        device: &Device,
    ) -> Result<Self::Batch, TrainError>;

    /// How inputs are standardised: fitted by [`TaskData::check`], saved with the run.
    fn normalization(&self) -> Normalization;

    /// A resumed run standardises as the saved run did.
    fn keep_normalization(&mut self, normalization: Normalization);

    /// What the run reads, and how.
    fn report(&self, config: &TrainConfig, loader: &LoaderOptions) -> DatasetReport;

    /// Files left out so far, each with its problem: by default none.
    fn skipped(&self) -> Vec<String> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests;
