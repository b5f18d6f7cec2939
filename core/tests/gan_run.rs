//! The GAN's two phases in a real run: each phase cuts the step its own way, a resumed run
//! (both networks, both networks' optimizer state) ends where the uninterrupted one does,
//! and a phase that runs out of memory is redone smaller alone.

use headroom_core::budget::Budget;
use headroom_core::events::{Event, steps};
use headroom_core::gan::{GanConfig, GanNetworks, GanShape};
use headroom_core::memory::alloc::CountingAllocator;
use headroom_core::model::{ModelSpec, flat_parameters, largest_difference};
use headroom_core::train::DatasetSource;
use headroom_core::{BackendKind, RunLength, RunOptions, TaskTrainer, TrainConfig};
use headroom_datasets::SyntheticConfig;

// The budget guard reads host memory on flex, so this binary counts allocations.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator(std::alloc::System);

/// The guard reads the whole process's memory: tests here take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A small GAN on 64 x 32 patches of two machine IDs: 8 spectrograms x 2 patches a step.
fn config(steps: u64) -> TrainConfig {
    let gan = GanConfig {
        shape: GanShape {
            mels: 64,
            frames: 32,
            latent: 8,
            width: 8,
        },
        ..GanConfig::default()
    };
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
        ..TrainConfig::default()
    };
    c.dataset = DatasetSource::Synthetic(SyntheticConfig {
        machine_ids: 2,
        train_per_id: 10,
        test_normal_per_id: 1,
        test_anomaly_per_id: 1,
        n_mels: 64,
        ..SyntheticConfig::default()
    });
    c.model = ModelSpec::of(&gan);
    c
}

/// Every parameter of one network, in visiting order.
#[test]
fn each_phase_cuts_the_step_its_own_way_and_a_resumed_run_ends_where_the_whole_one_does() {
    let _alone = alone();
    let mut whole_config = config(6);
    // The discriminator takes the step's 8 spectrograms at once, the generator 3, 3 and 2.
    whole_config.set_phase_micro_batches(&[8, 3]);
    let fresh = TaskTrainer::<GanConfig>::new(whole_config.clone(), RunOptions::default())
        .unwrap()
        .model()
        .clone();

    let mut whole =
        TaskTrainer::<GanConfig>::new(whole_config.clone(), RunOptions::default()).unwrap();
    let mut events = Vec::new();
    whole.run(&mut events).unwrap();
    let reports = steps(&events);
    assert_eq!(reports.len(), 6);
    for step in &reports {
        let cuts: Vec<(&str, usize, usize)> = step
            .phases
            .iter()
            .map(|p| (p.phase.as_str(), p.micro_batch, p.accumulation))
            .collect();
        assert_eq!(
            cuts,
            vec![("discriminator", 8, 1), ("generator", 3, 3)],
            "step {}",
            step.step
        );
        assert!(
            step.phases
                .iter()
                .all(|p| p.loss.is_finite() && p.peak_bytes > 0)
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let mut first = TaskTrainer::<GanConfig>::new(
        whole_config,
        RunOptions {
            out_dir: Some(dir.path().to_path_buf()),
            stop_after: Some(3),
            ..RunOptions::default()
        },
    )
    .unwrap();
    first.run(&mut Vec::new()).unwrap();
    assert_eq!(first.step(), 3);
    let mut resumed =
        TaskTrainer::<GanConfig>::resume(dir.path(), &Default::default(), RunOptions::default())
            .unwrap();
    assert_eq!(resumed.config().phase_micro_batches, vec![8, 3]);
    resumed.run(&mut Vec::new()).unwrap();
    assert_eq!(resumed.step(), 6);

    let (a, b): (&GanNetworks, &GanNetworks) = (whole.model(), resumed.model());
    for (name, a, b, start) in [
        (
            "generator",
            flat_parameters(&a.generator),
            flat_parameters(&b.generator),
            flat_parameters(&fresh.generator),
        ),
        (
            "discriminator",
            flat_parameters(&a.discriminator),
            flat_parameters(&b.discriminator),
            flat_parameters(&fresh.discriminator),
        ),
    ] {
        let worst = largest_difference(&a, &b);
        assert!(worst < 1e-5, "{name}: largest parameter difference {worst}");
        // It trained: the network moved from where it started.
        assert!(
            largest_difference(&a, &start) > 1e-4,
            "{name} did not train"
        );
    }
}

/// On one thread: with two, a flex step's peak moved by a few MiB from step to step with
/// how the threads shared its work, enough to put the lighter phase over a budget drawn
/// between the two (the threads' share is bench/gan_inrun's to measure).
#[test]
fn a_phase_that_runs_out_of_memory_is_redone_smaller_alone() {
    let _alone = alone();
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool of one thread")
        .install(redone_smaller_alone);
}

fn redone_smaller_alone() {
    let budget = Budget::new(0);
    let mut run = TaskTrainer::<GanConfig>::new(
        config(5),
        RunOptions {
            budget: Some(budget.clone()),
            ..RunOptions::default()
        },
    )
    .unwrap();
    // After step 2, the budget falls between the two phases' peaks, 70% of the way up: the
    // heavier phase no longer fits at 8 spectrograms, the lighter one still does.
    let mut heavier = None;
    let mut events = Vec::new();
    let mut sink = |event: Event| {
        if let Event::Step(s) = &event
            && s.step == 2
        {
            let [d, g] = [&s.phases[0], &s.phases[1]];
            let (light, heavy) = if d.peak_bytes < g.peak_bytes {
                (d, g)
            } else {
                (g, d)
            };
            heavier = Some(heavy.phase.clone());
            budget.set(light.peak_bytes + (heavy.peak_bytes - light.peak_bytes) * 7 / 10);
        }
        events.push(event);
    };
    run.run(&mut sink).unwrap();
    let heavier = heavier.expect("step 2 ran");

    let recoveries: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Recovery(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    // The first recovery redoes step 3. A later step may still run over and is redone in
    // turn; every one shrinks the heavier phase alone and keeps the effective batch.
    assert_eq!(
        recoveries.first().map(|r| r.step),
        Some(3),
        "{recoveries:?}"
    );
    for r in &recoveries {
        assert_eq!(r.phase.as_deref(), Some(heavier.as_str()), "{r:?}");
        assert!(r.to_micro_batch < r.from_micro_batch, "{r:?}");
        assert_eq!(r.effective_batch, 16);
    }
    let reports = steps(&events);
    assert_eq!(
        reports.iter().map(|s| s.step).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5],
        "every step once, none lost"
    );
    let limit = budget.bytes().unwrap();
    for step in reports.iter().filter(|s| s.step >= 3) {
        // The heavier phase's micro-batch is the one the last recovery up to this step chose.
        let shrunk = recoveries
            .iter()
            .rfind(|r| r.step <= step.step)
            .map(|r| r.to_micro_batch);
        for phase in &step.phases {
            let expected = if phase.phase == heavier {
                shrunk
            } else {
                Some(8)
            };
            assert_eq!(
                Some(phase.micro_batch),
                expected,
                "step {}: {phase:?}",
                step.step
            );
        }
        assert!(
            step.mem_peak_bytes <= limit,
            "step {} peaked at {} over the budget {limit}",
            step.step,
            step.mem_peak_bytes
        );
    }
}
