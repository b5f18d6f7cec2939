//! A kind of training that is not the patch task, defined here as a user or a new module
//! would: utterance-like sequences of every length, padded per micro-batch, through two
//! networks stepped in two phases. It opens, plans, trains, validates, checkpoints and
//! resumes through the same loop as the built-in models, with nothing of the loop written
//! for it.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Distribution, Gradients, Tensor, TensorData, activation};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{EvalBatches, RunTask, TaskData};
use crate::backend::BackendKind;
use crate::config::{RunLength, TrainConfig};
use crate::data::{LoaderOptions, Normalization};
use crate::events::{DatasetReport, Event, Results, ResultsRow, validation_losses};
use crate::model::{AnalyticStep, DefaultBatch, ModelSpec, NamedConfig, StepLoss};
use crate::plan::{Fixed, Planning};
use crate::precision::Precision;
use crate::readback::{self, LocalFuture};
use crate::task::{StepContext, TrainingTask};
use crate::train::{Evaluation, RunOptions, TaskTrainer, TrainError};

/// Values per frame.
const WIDTH: usize = 4;
const HIDDEN: usize = 8;
/// The longest sequence, in frames: what the planner measures.
const LONGEST: usize = 12;

/// Learns each sequence's target, a fixed function of its frames' mean, from a frame encoder
/// and a head over the mean of the encoded frames (padding left out).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct SequenceMean {
    sequences: usize,
}

impl NamedConfig for SequenceMean {
    const NAME: &'static str = "sequence-mean";
}

#[derive(Module, Debug)]
struct EncoderAndHead {
    encoder: Linear,
    head: Linear,
}

/// A micro-batch: sequences padded to the longest among them.
#[derive(Debug, Clone)]
struct Padded {
    /// `[n, frames, WIDTH]`.
    frames: Tensor<3>,
    /// `[n, frames]`: 1 where a frame is the sequence's, 0 where it is padding.
    mask: Tensor<2>,
    /// `[n, 1]`.
    targets: Tensor<2>,
}

impl Padded {
    fn of(sequences: &[&Sequence], normalization: Normalization, device: &Device) -> Self {
        let n = sequences.len();
        let longest = sequences.iter().map(|s| s.len()).max().unwrap_or(1);
        let mut frames = vec![0.0f32; n * longest * WIDTH];
        let mut mask = vec![0.0f32; n * longest];
        for (i, s) in sequences.iter().enumerate() {
            for (t, frame) in s.values.chunks(WIDTH).enumerate() {
                let at = (i * longest + t) * WIDTH;
                frames[at..at + WIDTH].copy_from_slice(frame);
                mask[i * longest + t] = 1.0;
            }
        }
        normalization.apply(&mut frames);
        let targets: Vec<f32> = sequences.iter().map(|s| s.target).collect();
        Self {
            frames: Tensor::from_data(TensorData::new(frames, [n, longest, WIDTH]), device),
            mask: Tensor::from_data(TensorData::new(mask, [n, longest]), device),
            targets: Tensor::from_data(TensorData::new(targets, [n, 1]), device),
        }
    }
}

impl SequenceMean {
    /// Each sequence's squared error, `[n]`.
    fn errors(networks: &EncoderAndHead, batch: Padded) -> Tensor<1> {
        let [n, frames, _] = batch.frames.dims();
        let encoded = activation::relu(networks.encoder.forward(batch.frames));
        let mask = batch.mask.reshape([n, frames, 1]);
        let lengths = mask.clone().sum_dim(1).reshape([n, 1]);
        let pooled = (encoded * mask).sum_dim(1).reshape([n, HIDDEN]) / lengths;
        let predicted = networks.head.forward(pooled);
        (predicted - batch.targets).square().reshape([n])
    }
}

impl TrainingTask for SequenceMean {
    type Networks = EncoderAndHead;
    type Batch = Padded;

    fn phases(&self) -> &'static [&'static str] {
        &["encoder", "head"]
    }
    fn networks(&self, device: &Device) -> EncoderAndHead {
        EncoderAndHead {
            encoder: LinearConfig::new(WIDTH, HIDDEN).init(device),
            head: LinearConfig::new(HIDDEN, 1).init(device),
        }
    }
    fn examples_in(&self, batch: &Padded) -> usize {
        batch.targets.dims()[0]
    }
    fn measuring_batch(&self, examples: usize, device: &Device) -> Padded {
        Padded {
            frames: Tensor::random(
                [examples, LONGEST, WIDTH],
                Distribution::Normal(0.0, 1.0),
                device,
            ),
            mask: Tensor::ones([examples, LONGEST], device),
            targets: Tensor::zeros([examples, 1], device),
        }
    }
    fn loss(&self, networks: &EncoderAndHead, _: usize, batch: Padded, _: StepContext) -> StepLoss {
        let total = Self::errors(networks, batch).mean();
        StepLoss {
            reported: total.clone(),
            total,
        }
    }
    fn phase_gradients(
        &self,
        networks: &EncoderAndHead,
        phase: usize,
        mut grads: Gradients,
    ) -> GradientsParams {
        match phase {
            0 => GradientsParams::from_module(&mut grads, &networks.encoder),
            _ => GradientsParams::from_module(&mut grads, &networks.head),
        }
    }
    fn parameters(&self) -> u64 {
        (WIDTH * HIDDEN + HIDDEN + HIDDEN + 1) as u64
    }
    fn step_memory(&self, _: BackendKind, _: Precision, examples: usize) -> AnalyticStep {
        let frames = (examples * LONGEST) as u64;
        AnalyticStep {
            parameters: 4 * self.parameters(),
            activations: 4 * frames * 2 * HIDDEN as u64,
            data: 4 * frames * (WIDTH + 1) as u64,
        }
    }
}

/// One example: `len` frames of `WIDTH` values and its target.
#[derive(Debug, Clone)]
struct Sequence {
    values: Vec<f32>,
    target: f32,
}

impl Sequence {
    fn len(&self) -> usize {
        self.values.len() / WIDTH
    }

    /// Lengths from 2 to `LONGEST` frames; the target the first value's mean over the frames
    /// minus the second's, which the encoder's mean pooling can learn.
    fn draw(rng: &mut ChaCha8Rng) -> Self {
        let len = rng.random_range(2..=LONGEST);
        let values: Vec<f32> = (0..len * WIDTH)
            .map(|_| rng.random_range(-1.0f32..1.0) + 0.5)
            .collect();
        let mean = |k: usize| values.iter().skip(k).step_by(WIDTH).sum::<f32>() / len as f32;
        let target = mean(0) - mean(1);
        Self { values, target }
    }
}

struct SequenceData {
    train: Vec<Sequence>,
    validation: Vec<Sequence>,
    test: Vec<Sequence>,
    normalization: Normalization,
}

impl RunTask for SequenceMean {
    type Data = SequenceData;

    fn open(
        self,
        config: &TrainConfig,
        _: &LoaderOptions,
    ) -> Result<(Self, SequenceData), TrainError> {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let mut draw = |n: usize| (0..n).map(|_| Sequence::draw(&mut rng)).collect();
        let data = SequenceData {
            train: draw(self.sequences),
            validation: draw(8),
            test: draw(8),
            normalization: Normalization {
                mean: 0.0,
                std: 1.0,
            },
        };
        Ok((self, data))
    }

    fn validation_loss<'a>(
        &'a self,
        networks: &'a EncoderAndHead,
        data: &'a SequenceData,
        device: &'a Device,
        batches: &'a EvalBatches,
    ) -> LocalFuture<'a, Result<f64, TrainError>> {
        Box::pin(async move {
            let networks = networks.valid();
            let mut sum = 0.0;
            for part in data.validation.chunks(batches.examples) {
                let part: Vec<&Sequence> = part.iter().collect();
                let batch = Padded::of(&part, data.normalization, device);
                sum += readback::scalar(Self::errors(&networks, batch).sum()).await? as f64;
            }
            Ok(sum / data.validation.len().max(1) as f64)
        })
    }

    /// The mean squared error on the validation and test splits.
    fn evaluate<'a>(
        &'a self,
        networks: &'a EncoderAndHead,
        data: &'a SequenceData,
        device: &'a Device,
        _: &'a EvalBatches,
        skipped: Vec<String>,
    ) -> LocalFuture<'a, Result<Evaluation, TrainError>> {
        Box::pin(async move {
            let networks = networks.valid();
            let mut rows = Vec::new();
            for (label, split) in [("validation", &data.validation), ("test", &data.test)] {
                let all: Vec<&Sequence> = split.iter().collect();
                let batch = Padded::of(&all, data.normalization, device);
                let mean = readback::scalar(Self::errors(&networks, batch).mean()).await?;
                rows.push(ResultsRow {
                    label: label.into(),
                    examples: split.len(),
                    values: vec![f64::from(mean)],
                });
            }
            Ok(Evaluation::Results(Results {
                about: "mean squared error of each sequence's predicted target".into(),
                measures: vec!["MSE".into()],
                rows,
                skipped,
            }))
        })
    }
}

impl TaskData for SequenceData {
    type Batch = Padded;

    /// Fits the normalization on the train frames, as a spectrogram task fits it on the
    /// train split's values.
    fn check(&mut self) -> Result<(), TrainError> {
        self.normalization = Normalization::fit(self.train.iter().flat_map(|s| s.values.iter()));
        Ok(())
    }
    fn train_examples(&self) -> usize {
        self.train.len()
    }
    fn validation_examples(&self) -> usize {
        self.validation.len()
    }
    fn test_examples(&self) -> usize {
        self.test.len()
    }
    fn micro_batch(
        &mut self,
        first: u64,
        count: usize,
        device: &Device,
    ) -> Result<Padded, TrainError> {
        let n = self.train.len() as u64;
        let picked: Vec<&Sequence> = (first..first + count as u64)
            .map(|position| &self.train[(position % n) as usize])
            .collect();
        Ok(Padded::of(&picked, self.normalization, device))
    }
    fn normalization(&self) -> Normalization {
        self.normalization
    }
    fn keep_normalization(&mut self, normalization: Normalization) {
        self.normalization = normalization;
    }
    fn report(&self, _: &TrainConfig, _: &LoaderOptions) -> DatasetReport {
        DatasetReport {
            source: "generated sequences".into(),
            machine_types: Vec::new(),
            train_clips: self.train.len(),
            validation_clips: self.validation.len(),
            test_clips: self.test.len(),
            resident: true,
            host_memory_bytes: 0,
            skipped: Vec::new(),
        }
    }
}

/// A run of the sequence task: micro-batches of 4 sequences, accumulated twice.
fn config(steps: u64) -> TrainConfig {
    let mut config = TrainConfig {
        micro_batch: 4,
        n_patches: 1,
        accumulation: 2,
        length: RunLength::Steps(steps),
        lr: 1e-2,
        min_lr: 1e-2,
        validate_every: 0,
        checkpoint_every: 0,
        ..TrainConfig::default()
    };
    config.model = ModelSpec::of(&SequenceMean { sequences: 40 });
    config
}

fn run(config: TrainConfig, options: RunOptions) -> (TaskTrainer<SequenceMean>, Vec<Event>) {
    let mut trainer = TaskTrainer::<SequenceMean>::new(config, options).unwrap();
    let mut events = Vec::new();
    trainer.run(&mut events).unwrap();
    (trainer, events)
}

#[test]
fn a_task_of_its_own_trains_and_resumes_exactly_through_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let trained = {
        let mut config = config(30);
        config.validate_every = 10;
        config.checkpoint_every = 15;
        let options = RunOptions {
            out_dir: Some(dir.path().to_path_buf()),
            ..RunOptions::default()
        };
        run(config, options)
    };
    let (whole, events) = trained;
    let losses = validation_losses(&events);
    assert_eq!(
        losses.len(),
        3,
        "validated at steps 10 and 20, and at the end"
    );
    assert!(
        losses[2] < 0.8 * losses[0],
        "the sequence task learns: validation losses {losses:?}"
    );
    let steps: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Step(step) => Some(step),
            _ => None,
        })
        .collect();
    assert_eq!(steps.len(), 30);
    let phases: Vec<&str> = steps[0].phases.iter().map(|p| p.phase.as_str()).collect();
    assert_eq!(phases, ["encoder", "head"], "each phase is reported");
    assert_eq!(steps[0].phases[0].loss, steps[0].loss);

    // Continued from the run's own checkpoint at step 15 (not from a second run's: the
    // device's random generator is shared by tests running beside this one, so two runs
    // need not start alike).
    let halfway = dir.path().join("checkpoints/step-00000015");
    let mut resumed =
        TaskTrainer::<SequenceMean>::resume(&halfway, &Default::default(), RunOptions::default())
            .unwrap();
    assert_eq!(resumed.step(), 15);
    resumed.run(&mut Vec::new()).unwrap();
    assert_eq!(resumed.step(), 30);
    assert_eq!(
        crate::model::flat_parameters(resumed.model()),
        crate::model::flat_parameters(whole.model()),
        "a resumed run ends where the uninterrupted one does"
    );
    let Evaluation::Results(results) = resumed.evaluate().unwrap() else {
        panic!("the sequence task reports its own results")
    };
    let test = &results.rows[1];
    assert_eq!((test.label.as_str(), test.examples), ("test", 8));
    assert!(
        test.values[0] < losses[0],
        "the test error ({}) is below the first validation loss ({})",
        test.values[0],
        losses[0]
    );
}

#[test]
fn a_task_of_its_own_is_planned_and_keeps_its_effective_batch() {
    let fixed = Fixed {
        n_patches: Some(1),
        ..Fixed::default()
    };
    let defaults = DefaultBatch {
        spectrograms: 8,
        patches: 1,
    };
    let planning = Planning::new(256 << 20, Some(8), fixed, defaults).unwrap();
    let mut events = Vec::new();
    let mut trainer = TaskTrainer::<SequenceMean>::new(
        config(4),
        RunOptions {
            planning: Some(planning),
            ..RunOptions::default()
        },
    )
    .unwrap();
    trainer.run(&mut events).unwrap();
    let plan = trainer.plan().expect("the run was planned");
    assert_eq!(plan.split().effective_batch(), 8);
    assert!(
        events.iter().any(|e| matches!(e, Event::DryRun(_))),
        "the plan was checked with a real step"
    );
    assert_eq!(trainer.step(), 4);
}
