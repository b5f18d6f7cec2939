//! The speech task trains, plans, resumes and reports its error rates through the engine's
//! one loop, as every kind of training does.

use headroom_datasets::speech::synthetic::SpeechConfig;

use burn::optim::SgdConfig;
use burn::tensor::{Distribution, Tensor};

use super::AsrConfig;
use crate::backend::BackendKind;
use crate::events::Event;
use crate::memory::MemoryMeter;
use crate::model::asr::Utterances;
use crate::model::flat_parameters;
use crate::plan::{Fixed, Planning, PlanningError};
use crate::precision::Precision;
use crate::readback::block_on;
use crate::step::accumulate_gradients;
use crate::task::{StepContext, TrainingTask};
use crate::train::{BuiltIn, Evaluation, RunOptions, TaskTrainer};
use crate::{RunLength, TrainConfig};

/// A small corpus: a few dozen short utterances.
fn task() -> AsrConfig {
    AsrConfig {
        corpus: SpeechConfig {
            train: 24,
            validation: 4,
            test: 4,
            median_words: 2.0,
            ..SpeechConfig::default()
        },
        ..AsrConfig::default()
    }
}

fn config(steps: u64) -> TrainConfig {
    let mut config = TrainConfig {
        length: RunLength::Steps(steps),
        validate_every: 0,
        checkpoint_every: 0,
        ..TrainConfig::default()
    };
    task().configure(&mut config);
    config.micro_batch = 4;
    config.accumulation = 2;
    config
}

/// The run saves a checkpoint halfway; continuing from it ends where the run itself did.
/// (Resumed from the run's own checkpoint rather than a second run's: the device's random
/// generator is shared by tests running beside this one, so two runs need not start alike.)
#[test]
fn a_speech_run_trains_resumes_exactly_and_reports_cer_and_wer() {
    let dir = tempfile::tempdir().unwrap();
    let mut run_config = config(6);
    run_config.checkpoint_every = 3;
    let mut whole = TaskTrainer::<AsrConfig>::new(
        run_config,
        RunOptions {
            out_dir: Some(dir.path().to_path_buf()),
            ..RunOptions::default()
        },
    )
    .unwrap();
    let mut events = Vec::new();
    whole.run(&mut events).unwrap();
    let saved: AsrConfig = whole.config().model.config().unwrap();
    let vocabulary = saved
        .vocabulary
        .expect("the vocabulary is saved with the run");
    assert_eq!(vocabulary.len(), 2 + 25, "24 letters and the space");
    assert!(saved.longest.frames > 100, "{:?}", saved.longest);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Validation { loss, .. } if loss.is_finite())),
        "a validation loss"
    );

    let halfway = dir.path().join("checkpoints/step-00000003");
    let mut resumed =
        TaskTrainer::<AsrConfig>::resume(&halfway, &Default::default(), RunOptions::default())
            .unwrap();
    assert_eq!(resumed.step(), 3);
    resumed.run(&mut Vec::new()).unwrap();
    let (a, b) = (
        crate::model::flat_parameters(resumed.model()),
        crate::model::flat_parameters(whole.model()),
    );
    let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    assert_eq!(
        differing,
        0,
        "a resumed run ends where the uninterrupted one does ({differing} of {} differ)",
        a.len()
    );

    let Evaluation::Results(results) = whole.evaluate().unwrap() else {
        panic!("a speech run reports its own results")
    };
    assert_eq!(
        results.measures,
        ["CER", "WER", "attention CER", "attention WER"]
    );
    let labels: Vec<&str> = results.rows.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["validation", "test"]);
    for row in &results.rows {
        assert!(
            row.values.iter().all(|v| v.is_finite() && *v >= 0.0),
            "{row:?}"
        );
    }
}

#[test]
fn a_speech_run_is_planned_on_whole_utterances_and_refuses_patches() {
    let defaults = task().default_batch();
    let planning = Planning::new(1 << 30, Some(8), Fixed::default(), defaults).unwrap();
    let mut trainer = TaskTrainer::<AsrConfig>::new(
        config(1),
        RunOptions {
            planning: Some(planning),
            ..RunOptions::default()
        },
    )
    .unwrap();
    let plan = trainer.plan().expect("planned").clone();
    assert_eq!((plan.n_patches, plan.split().effective_batch()), (1, 8));
    trainer.run(&mut Vec::new()).unwrap();

    let patches = Fixed {
        n_patches: Some(4),
        ..Fixed::default()
    };
    let planning = Planning::new(1 << 30, Some(8), patches, defaults).unwrap();
    let refused = TaskTrainer::<AsrConfig>::new(
        config(1),
        RunOptions {
            planning: Some(planning),
            ..RunOptions::default()
        },
    );
    assert!(
        matches!(
            refused,
            Err(crate::TrainError::Planning(PlanningError::WholeItems {
                n_patches: 4
            }))
        ),
        "{:?}",
        refused.err()
    );
}

/// Utterances of `frames`, each its own random features and transcript, padded to the
/// longest.
fn utterances(all: &[(Tensor<3>, usize, Vec<usize>)]) -> Utterances {
    let longest = all.iter().map(|(_, f, _)| *f).max().unwrap();
    let features = all
        .iter()
        .map(|(x, f, _)| {
            let [_, _, mels] = x.dims();
            if *f == longest {
                x.clone()
            } else {
                let pad = Tensor::zeros([1, longest - f, mels], &x.device());
                Tensor::cat(vec![x.clone(), pad], 1)
            }
        })
        .collect();
    Utterances {
        features: Tensor::cat(features, 0),
        frames: all.iter().map(|(_, f, _)| *f).collect(),
        tokens: all.iter().map(|(_, _, t)| t.clone()).collect(),
    }
}

/// The effective batch is exact: a step of four utterances of different lengths packed
/// into two micro-batches by length gives the gradient of the four in one micro-batch.
#[test]
fn a_step_packed_by_length_has_the_gradient_of_the_whole_batch() {
    let device = BackendKind::Flex.device().unwrap().autodiff();
    device.seed(11);
    let task = task();
    let networks = task.networks(&device);
    let mels = task.mels;
    let all: Vec<(Tensor<3>, usize, Vec<usize>)> = [(23, 2), (31, 3), (64, 5), (90, 4)]
        .iter()
        .map(|&(frames, words)| {
            let x = Tensor::random([1, frames, mels], Distribution::Normal(0.0, 1.0), &device);
            (
                x,
                frames,
                (0..words).map(|w| 3 + (w * 7 + frames) % 20).collect(),
            )
        })
        .collect();
    let whole = utterances(&all);
    let (short, long) = (utterances(&all[..2]), utterances(&all[2..]));
    let context = StepContext {
        precision: Precision::F32,
        warming_up: false,
    };
    let mut meter = MemoryMeter::new(BackendKind::Flex, &device);
    let mut gradient_step = |batches: Vec<Utterances>| {
        let (grads, loss, _) = block_on(accumulate_gradients(
            &task, &networks, 0, batches, 4, context, &mut meter,
        ))
        .unwrap();
        // Plain SGD at rate 1: parameters move by exactly the gradient.
        let mut sgd = SgdConfig::new().init();
        let moved = sgd.step(1.0, networks.clone(), grads);
        (flat_parameters(&moved), loss)
    };
    let (one, one_loss) = gradient_step(vec![whole]);
    let (split, split_loss) = gradient_step(vec![short, long]);
    let base = flat_parameters(&networks);
    let (mut largest, mut worst) = (0.0f32, 0.0f32);
    for ((a, b), p) in one.iter().zip(&split).zip(&base) {
        largest = largest.max((a - p).abs());
        worst = worst.max((a - b).abs());
    }
    assert!(largest > 1e-4, "the gradient is not zero: {largest}");
    assert!(
        worst <= 1e-4 * largest,
        "split and whole differ by {worst} (largest gradient {largest})"
    );
    assert!(
        (one_loss - split_loss).abs() <= 1e-5 * one_loss.abs(),
        "{one_loss} vs {split_loss}"
    );
}

/// The measuring features have the mean and spread of the normal draws they replace, and
/// two draws differ.
#[test]
fn measuring_features_have_mean_zero_and_variance_one() {
    let values = super::measuring_features(200_000);
    let n = values.len() as f64;
    let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let variance = values
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / n;
    assert!(mean.abs() < 0.01, "mean {mean}");
    assert!((variance - 1.0).abs() < 0.02, "variance {variance}");
    assert!(values.iter().all(|v| v.is_finite() && v.abs() <= 3.47));
    assert_ne!(super::measuring_features(16), super::measuring_features(16));
}
