//! The classifier fed by a GAN in real runs: a GAN trains and saves, a classifier run reads
//! its generator and trains two classifiers side by side, each phase cut its own way; a
//! resumed run ends where the uninterrupted one does without the GAN's checkpoint; the
//! frozen generator leaves nothing behind from step to step; bad generators are refused
//! with words.

use headroom_core::classifier::{ClassifierConfig, ClassifierNetworks, GeneratedPatches};
use headroom_core::events;
use headroom_core::gan::{GanConfig, GanShape};
use headroom_core::memory::alloc::CountingAllocator;
use headroom_core::model::{ModelSpec, PatchShape, flat_parameters, largest_difference};
use headroom_core::train::{DatasetSource, Evaluation};
use headroom_core::{BackendKind, RunLength, RunOptions, TaskTrainer, TrainConfig};
use headroom_datasets::SyntheticConfig;

// The budget guard reads host memory on flex, so this binary counts allocations.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator(std::alloc::System);

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

const PATCH: PatchShape = PatchShape {
    mels: 64,
    frames: 32,
};

/// 8 spectrograms x 2 patches of 64 x 32 a step, on `machine_ids` IDs.
fn config(steps: u64, machine_ids: u32, model: ModelSpec) -> TrainConfig {
    let mut c = TrainConfig {
        backend: BackendKind::Flex,
        micro_batch: 8,
        n_patches: 2,
        accumulation: 1,
        stride: 16,
        eval_stride: 32,
        length: RunLength::Steps(steps),
        lr: 1e-3,
        validation_every_nth_clip: 0,
        seed: 5,
        model,
        ..TrainConfig::default()
    };
    c.dataset = DatasetSource::Synthetic(SyntheticConfig {
        machine_ids,
        train_per_id: 6,
        test_normal_per_id: 1,
        test_anomaly_per_id: 1,
        n_mels: 64,
        ..SyntheticConfig::default()
    });
    c
}

/// A small GAN trained for two steps and saved under `dir`.
fn trained_gan(dir: &std::path::Path, machine_ids: u32) {
    let gan = GanConfig {
        shape: GanShape {
            mels: PATCH.mels,
            frames: PATCH.frames,
            latent: 8,
            width: 4,
        },
        ..GanConfig::default()
    };
    let options = RunOptions {
        out_dir: Some(dir.to_path_buf()),
        ..RunOptions::default()
    };
    let mut run =
        TaskTrainer::<GanConfig>::new(config(2, machine_ids, ModelSpec::of(&gan)), options)
            .unwrap();
    run.run(&mut Vec::new()).unwrap();
}

fn classifier(gan_dir: Option<&std::path::Path>, share: f64) -> ModelSpec {
    ModelSpec::of(&ClassifierConfig {
        patch: PATCH,
        generated: gan_dir.map(|dir| GeneratedPatches::from(dir.to_path_buf(), share)),
        ..ClassifierConfig::default()
    })
}

#[test]
fn two_classifiers_train_side_by_side_and_resume_without_the_gans_checkpoint() {
    let _alone = alone();
    let gan_dir = tempfile::tempdir().unwrap();
    trained_gan(gan_dir.path(), 3);
    let mut whole_config = config(6, 3, classifier(Some(gan_dir.path()), 0.5));
    // The real-data classifier takes the step's 8 spectrograms at once, the other 3, 3, 2.
    whole_config.set_phase_micro_batches(&[8, 3]);

    let mut whole =
        TaskTrainer::<ClassifierConfig>::new(whole_config.clone(), RunOptions::default()).unwrap();
    let mut events = Vec::new();
    whole.run(&mut events).unwrap();
    let steps = events::steps(&events);
    assert_eq!(steps.len(), 6);
    for step in &steps {
        let cuts: Vec<(&str, usize, usize)> = step
            .phases
            .iter()
            .map(|p| (p.phase.as_str(), p.micro_batch, p.accumulation))
            .collect();
        assert_eq!(cuts, vec![("real", 8, 1), ("real + generated", 3, 3)]);
    }
    // The frozen generator runs untracked: no step leaves more allocated than the first
    // one did beyond a little slack (a tracked one left its forward's graph every step).
    let held: Vec<u64> = steps.iter().map(|s| s.mem_allocated_bytes).collect();
    assert!(
        held.iter().all(|&h| h <= held[0] + held[0] / 5),
        "allocated after each step {held:?}"
    );
    // The generator is the GAN's, untouched by six steps.
    let saved = headroom_core::checkpoint::CheckpointFiles::read(gan_dir.path()).unwrap();
    let gan = saved
        .0
        .decode_task::<GanConfig, headroom_core::gan::GanNetworks>(
            &saved.1,
            &BackendKind::Flex.device().unwrap(),
            |c| {
                use headroom_core::task::TrainingTask;
                let device = BackendKind::Flex.device().unwrap();
                (c.networks(&device), c.optimizer())
            },
        )
        .unwrap();
    let generator = whole.model().generator.as_ref().unwrap();
    assert_eq!(
        largest_difference(
            &flat_parameters(generator),
            &flat_parameters(&gan.model.generator)
        ),
        0.0
    );

    let Evaluation::Results(results) = whole.evaluate().unwrap() else {
        panic!("a classifier run reports results");
    };
    assert_eq!(
        results.measures,
        [
            "accuracy, real data",
            "accuracy, real + generated",
            "generated placed"
        ]
    );
    // Three machines and all; each test clip counted once, every value a share.
    assert_eq!(results.rows.len(), 4);
    assert_eq!(results.rows[3].examples, 6);
    assert!(
        results
            .rows
            .iter()
            .flat_map(|r| &r.values)
            .all(|v| (0.0..=1.0).contains(v))
    );

    // Stopped at step 3, the GAN's checkpoint gone, resumed to 6.
    let dir = tempfile::tempdir().unwrap();
    let mut first = TaskTrainer::<ClassifierConfig>::new(
        whole_config,
        RunOptions {
            out_dir: Some(dir.path().to_path_buf()),
            stop_after: Some(3),
            ..RunOptions::default()
        },
    )
    .unwrap();
    first.run(&mut Vec::new()).unwrap();
    drop(gan_dir);
    let mut resumed = TaskTrainer::<ClassifierConfig>::resume(
        dir.path(),
        &Default::default(),
        RunOptions::default(),
    )
    .unwrap();
    resumed.run(&mut Vec::new()).unwrap();
    assert_eq!(resumed.step(), 6);
    let (a, b): (&ClassifierNetworks, &ClassifierNetworks) = (whole.model(), resumed.model());
    for (name, a, b) in [
        ("real", flat_parameters(&a.real), flat_parameters(&b.real)),
        (
            "real + generated",
            flat_parameters(a.mixed.as_ref().unwrap()),
            flat_parameters(b.mixed.as_ref().unwrap()),
        ),
        (
            "generator",
            flat_parameters(a.generator.as_ref().unwrap()),
            flat_parameters(b.generator.as_ref().unwrap()),
        ),
    ] {
        let worst = largest_difference(&a, &b);
        assert!(worst < 1e-5, "{name}: largest parameter difference {worst}");
    }
}

#[test]
fn a_generator_of_other_machines_or_another_model_is_refused_with_words() {
    let _alone = alone();
    let gan_dir = tempfile::tempdir().unwrap();
    trained_gan(gan_dir.path(), 2);
    let error = TaskTrainer::<ClassifierConfig>::new(
        config(1, 3, classifier(Some(gan_dir.path()), 0.5)),
        RunOptions::default(),
    )
    .err()
    .expect("a generator of two machines for a run of three");
    let words = error.to_string();
    assert!(
        words.contains("synthetic id 01") && words.contains("synthetic id 02"),
        "{words}"
    );
    assert!(words.contains("same data"), "{words}");

    // A classifier run's checkpoint is no generator.
    let classifier_dir = tempfile::tempdir().unwrap();
    TaskTrainer::<ClassifierConfig>::new(
        config(1, 2, classifier(None, 0.5)),
        RunOptions {
            out_dir: Some(classifier_dir.path().to_path_buf()),
            ..RunOptions::default()
        },
    )
    .unwrap()
    .run(&mut Vec::new())
    .unwrap();
    let error = TaskTrainer::<ClassifierConfig>::new(
        config(1, 2, classifier(Some(classifier_dir.path()), 0.5)),
        RunOptions::default(),
    )
    .err()
    .expect("a classifier's checkpoint as the generator");
    let words = error.to_string();
    assert!(
        words.contains("spec-classifier run") && words.contains("--model spec-gan"),
        "{words}"
    );
    // A missing folder names the folder.
    let missing = gan_dir.path().join("nothing-here");
    let error = TaskTrainer::<ClassifierConfig>::new(
        config(1, 2, classifier(Some(&missing), 0.5)),
        RunOptions::default(),
    )
    .err()
    .expect("a missing generator");
    assert!(error.to_string().contains("nothing-here"), "{error}");
}
