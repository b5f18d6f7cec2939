//! The waveform task trains, resumes and reports bits per sample through the engine's one
//! loop, its examples crops of the splits' audio.

use burn::tensor::Int;
use headroom_datasets::waveform::DigitsConfig;

use super::*;
use crate::events::{Event, validation_losses};
use crate::train::{Evaluation, RunOptions, RunTask, TaskData, TaskTrainer};
use crate::{RunLength, TrainConfig};

/// A few clips, cut into short crops.
fn task() -> SashimiConfig {
    SashimiConfig {
        sample_len: 2_048,
        digits: DigitsConfig {
            train: 12,
            validation: 2,
            test: 2,
            ..DigitsConfig::default()
        },
        ..SashimiConfig::default()
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
    config
}

fn levels(batch: Tensor<2, Int>) -> Vec<i64> {
    batch
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .unwrap()
}

/// An epoch draws every crop of the train clips once, each the clips' samples end to end
/// from its place, in an order the seed fixes: a second data of the same seed draws the
/// same.
#[test]
fn an_epoch_draws_every_crop_of_the_clips_once() {
    let device = BackendKind::Flex.device().unwrap();
    let open = || {
        let (_, mut data) = task()
            .open(&config(1), &Default::default())
            .expect("opened");
        data.check().expect("made");
        data
    };
    let (mut data, mut again) = (open(), open());
    let crops = data.train_examples();
    assert_eq!(crops, 12 * 16_000 / 2_048);
    let stream: Vec<i64> = data.train.levels.iter().map(|&l| i64::from(l)).collect();
    // As multisets: crops of silence between the words are alike.
    let mut drawn: Vec<Vec<i64>> = (0..crops as u64)
        .map(|position| levels(data.micro_batch(position, 1, &device).unwrap()))
        .collect();
    let mut every: Vec<Vec<i64>> = stream.chunks_exact(2_048).map(<[i64]>::to_vec).collect();
    assert_ne!(drawn, every, "the epoch is shuffled");
    drawn.sort();
    every.sort();
    assert_eq!(drawn, every);
    let batch = levels(data.micro_batch(3, 4, &device).unwrap());
    assert_eq!(batch, levels(again.micro_batch(3, 4, &device).unwrap()));
}

/// The run learns (its validation NLL falls well below a uniform guess's 8 bits), saves a
/// checkpoint halfway that resumes to exactly where the run ends, and reports bits per
/// sample on both held-out splits.
#[test]
fn a_waveform_run_learns_resumes_exactly_and_reports_bits() {
    let dir = tempfile::tempdir().unwrap();
    let mut run_config = config(16);
    run_config.checkpoint_every = 8;
    run_config.validate_every = 8;
    let mut whole = TaskTrainer::<SashimiConfig>::new(
        run_config,
        RunOptions {
            out_dir: Some(dir.path().to_path_buf()),
            ..RunOptions::default()
        },
    )
    .unwrap();
    let mut events = Vec::new();
    whole.run(&mut events).unwrap();
    let losses: Vec<f64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Step(step) => Some(step.loss),
            _ => None,
        })
        .collect();
    let validation = validation_losses(&events);
    assert_eq!(losses.len(), 16);
    assert!(
        (losses[0] - 8.0).abs() < 0.6,
        "the first step's NLL is near a uniform guess's 8 bits: {losses:?}"
    );
    assert_eq!(validation.len(), 2, "{validation:?}");
    assert!(
        validation[1] < validation[0] && validation[1] < 7.0,
        "the validation NLL falls: {validation:?} (train {losses:?})"
    );

    let halfway = dir.path().join("checkpoints/step-00000008");
    let mut resumed =
        TaskTrainer::<SashimiConfig>::resume(&halfway, &Default::default(), RunOptions::default())
            .unwrap();
    assert_eq!(resumed.step(), 8);
    resumed.run(&mut Vec::new()).unwrap();
    let (a, b) = (
        crate::model::flat_parameters(resumed.model()),
        crate::model::flat_parameters(whole.model()),
    );
    let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    assert_eq!(differing, 0, "{differing} of {} parameters differ", a.len());

    let Evaluation::Results(results) = whole.evaluate().unwrap() else {
        panic!("a waveform run reports its own results")
    };
    assert_eq!(results.measures, ["NLL (bits/sample)"]);
    let rows: Vec<(&str, usize)> = results
        .rows
        .iter()
        .map(|r| (r.label.as_str(), r.examples))
        .collect();
    assert_eq!(rows, [("validation", 15), ("test", 15)]);
    let test = results.rows[1].values[0];
    assert!(test > 1.0 && test < 7.0, "test NLL {test} bits");
}

/// A crop the poolings cannot divide is refused with the lengths nearest it; the seed's
/// lengths are taken.
#[test]
fn a_crop_must_divide_by_the_poolings() {
    let at = |sample_len| SashimiConfig {
        sample_len,
        ..SashimiConfig::default()
    };
    for fine in [16, 16_000, 128_000, 131_072] {
        assert!(at(fine).check_sample_len().is_ok(), "{fine}");
    }
    let refused = at(16_010).check_sample_len().unwrap_err();
    assert!(
        refused.contains("multiple of 16") && refused.contains("16000 and 16016"),
        "{refused}"
    );
    assert!(at(8).check_sample_len().unwrap_err().contains("16)"));
}

#[test]
fn the_longest_crop_is_what_the_examples_part_leaves() {
    let crop = crate::task::Crop {
        len: 1_000,
        multiple: 16,
    };
    // 100 fixed, 1 per sample: 600 available leaves 500 samples, 496 a multiple of 16.
    assert_eq!(crop.longest_fitting(1_100, 1_000, 600), Some(496));
    assert_eq!(crop.longest_fitting(1_100, 1_000, 100), None);
    assert_eq!(crop.longest_fitting(1_100, 0, 600), None);
}

/// With seed 004's head, a discretized mixture of logistics, the run learns too (more
/// slowly than the categorical head at first: its validation NLL, already below a uniform
/// guess's 8 bits at step 16, falls by more than 0.15 bits by step 32; 7.77 to 7.58 on
/// 2026-12-07), and the trained network draws clips from it.
#[test]
fn a_mixture_head_learns_and_draws_clips() {
    let mut task = task();
    task.shape.mixtures = 6;
    let mut run_config = config(32);
    task.configure(&mut run_config);
    run_config.validate_every = 16;
    let mut trainer = TaskTrainer::<SashimiConfig>::new(run_config, RunOptions::default()).unwrap();
    let mut events = Vec::new();
    trainer.run(&mut events).unwrap();
    let validation = validation_losses(&events);
    assert!(
        validation.len() == 2 && validation[0] < 8.0 && validation[1] < validation[0] - 0.15,
        "the validation NLL falls: {validation:?}"
    );
    let network = burn::module::Module::valid(trainer.model());
    let clips = crate::readback::block_on(super::sampling::sample(&network, 2, 64, 5)).unwrap();
    assert_eq!(clips.iter().map(Vec::len).collect::<Vec<_>>(), [64, 64]);
    let distinct: std::collections::BTreeSet<u8> = clips.concat().into_iter().collect();
    assert!(distinct.len() > 3, "the draws vary: {clips:?}");
}

/// A run that keeps a moving average of its weights saves it in every checkpoint, resumes it
/// exactly, and is measured with it rather than with the weights it trains.
#[test]
fn a_moving_average_is_saved_resumed_and_measured() {
    let dir = tempfile::tempdir().unwrap();
    let mut run_config = config(6);
    run_config.ema = Some(0.8);
    run_config.checkpoint_every = 3;
    let options = || RunOptions {
        out_dir: Some(dir.path().to_path_buf()),
        ..RunOptions::default()
    };
    let mut whole = TaskTrainer::<SashimiConfig>::new(run_config, options()).unwrap();
    whole.run(&mut Vec::new()).unwrap();
    let halfway = dir.path().join("checkpoints/step-00000003");
    assert!(halfway.join("average.safetensors").is_file());
    let mut resumed =
        TaskTrainer::<SashimiConfig>::resume(&halfway, &Default::default(), RunOptions::default())
            .unwrap();
    resumed.run(&mut Vec::new()).unwrap();
    let flat = |model: &Sashimi| crate::model::flat_parameters(model);
    let average = flat(&whole.measured_model());
    assert_eq!(
        flat(&resumed.measured_model()),
        average,
        "the average resumes exactly"
    );
    assert_eq!(flat(resumed.model()), flat(whole.model()));
    assert_ne!(
        average,
        flat(whole.model()),
        "the average is not the trained weights"
    );

    let measured = whole.validation_loss().unwrap();
    let (_, mut data) = task().open(&config(6), &Default::default()).unwrap();
    data.check().unwrap();
    let plain = BackendKind::Flex.device().unwrap();
    let batches = crate::train::EvalBatches::of(whole.config());
    let with = |networks: &Sashimi| {
        crate::readback::block_on(
            whole
                .config()
                .model
                .config::<SashimiConfig>()
                .unwrap()
                .validation_loss(networks, &data, &plain, &batches),
        )
        .unwrap()
    };
    assert_eq!(measured, with(&whole.measured_model()));
    assert_ne!(measured, with(whole.model()));
}
