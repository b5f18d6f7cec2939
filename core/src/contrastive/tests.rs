//! The contrastive model: its count is what its towers hold, a step cut into micro-batches
//! by gradient caching has the whole step's gradient on the real towers, and a run whose
//! steps are cut trains, resumes exactly and reports recall both ways.

use burn::module::Module;
use burn::optim::SgdConfig;
use headroom_datasets::speech::synthetic::SpeechConfig;

use super::*;
use crate::events::Event;
use crate::memory::MemoryMeter;
use crate::model::flat_parameters;
use crate::readback::block_on;
use crate::step::{StepSettings, optimizer_step};
use crate::train::{Evaluation, RunOptions, TaskTrainer};

/// A small corpus: a few dozen short utterances.
fn task() -> ContrastiveConfig {
    let mut task = ContrastiveConfig::default();
    task.speech.corpus = SpeechConfig {
        train: 24,
        validation: 6,
        test: 6,
        median_words: 2.0,
        ..SpeechConfig::default()
    };
    task
}

#[test]
fn the_parameter_count_is_what_the_towers_hold() {
    let device = BackendKind::Flex.device().unwrap();
    let task = ContrastiveConfig::default();
    assert_eq!(
        task.networks(&device).num_params() as u64,
        task.parameters()
    );
}

/// The same 8 pairs (of one length, from the measuring batch) in one micro-batch and in
/// micro-batches of 3, 3 and 2: the same parameters after a step of plain SGD.
#[test]
fn a_cached_step_of_the_towers_is_the_whole_steps() {
    let device = BackendKind::Flex.device().unwrap().autodiff();
    device.seed(9);
    let task = task().at_length(120).unwrap();
    let start = task.networks(&device);
    let whole = task.measuring_batch(8, &device);
    let cut = |from: usize, n: usize| Utterances {
        features: whole.features.clone().narrow(0, from, n),
        frames: whole.frames[from..from + n].to_vec(),
        tokens: whole.tokens[from..from + n].to_vec(),
    };
    let step = |batches: Vec<Utterances>| {
        let mut meter = MemoryMeter::new(BackendKind::Flex, &device);
        let settings = StepSettings {
            step_examples: 8,
            lr: 0.1,
            clip_norm: None,
            warming_up: false,
            precision: Precision::F32,
        };
        let (next, outcome) = block_on(optimizer_step(
            &task,
            start.clone(),
            &mut SgdConfig::new().init(),
            batches,
            settings,
            &mut meter,
        ))
        .unwrap();
        (flat_parameters(&next), outcome.first().loss)
    };
    let (one, one_loss) = step(vec![whole.clone()]);
    let (cached, cached_loss) = step(vec![cut(0, 3), cut(3, 3), cut(6, 2)]);
    assert!(
        (one_loss - cached_loss).abs() < 1e-5,
        "{one_loss} {cached_loss}"
    );
    let worst = one
        .iter()
        .zip(&cached)
        .map(|(a, b)| (a - b).abs() / a.abs().max(1e-3))
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "largest relative difference {worst}");
    let moved = one
        .iter()
        .zip(&flat_parameters(&start))
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(moved > 1e-4, "the step moved the parameters by {moved}");
}

#[test]
fn a_cut_run_trains_resumes_exactly_and_reports_recall() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = TrainConfig {
        length: RunLength::Steps(6),
        validate_every: 0,
        checkpoint_every: 3,
        ..TrainConfig::default()
    };
    task().configure(&mut config);
    config.length = RunLength::Steps(6);
    config.validate_every = 0;
    config.checkpoint_every = 3;
    // 8 pairs a step in two micro-batches: every step is a cached one.
    config.micro_batch = 4;
    config.accumulation = 2;
    let mut whole = TaskTrainer::<ContrastiveConfig>::new(
        config,
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
            Event::Step(s) => Some(s.loss),
            _ => None,
        })
        .collect();
    assert_eq!(losses.len(), 6);
    // 8 pairs: a loss that tells nothing apart is ln 8.
    assert!(
        losses
            .iter()
            .all(|l| l.is_finite() && *l > 0.0 && *l < 2.0 * 8f64.ln()),
        "{losses:?}"
    );

    let halfway = dir.path().join("checkpoints/step-00000003");
    let mut resumed = TaskTrainer::<ContrastiveConfig>::resume(
        &halfway,
        &Default::default(),
        RunOptions::default(),
    )
    .unwrap();
    resumed.run(&mut Vec::new()).unwrap();
    let (a, b) = (
        flat_parameters(resumed.model()),
        flat_parameters(whole.model()),
    );
    let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    assert_eq!(differing, 0, "{differing} of {} parameters differ", a.len());

    let Evaluation::Results(results) = whole.evaluate().unwrap() else {
        panic!("a contrastive run reports its own results")
    };
    assert_eq!(results.measures.len(), 6);
    assert_eq!(results.measures[0], "R@1 audio to text");
    let labels: Vec<&str> = results.rows.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["validation", "test"]);
    for row in &results.rows {
        assert_eq!(row.examples, 6);
        // Recall grows with k, and among 6 pairs every one is within the top 10.
        assert!(row.values[0] <= row.values[1] && row.values[1] <= row.values[2]);
        assert_eq!((row.values[2], row.values[5]), (1.0, 1.0), "{row:?}");
    }
}
