//! Out-of-memory recovery, forced with the budget guard: the budget is lowered during a run
//! so that step k no longer fits, and the run must go on with the largest micro-batch that
//! fits the new budget and end where a run that used that micro-batch from step k on ends.

use headroom_core::budget::Budget;
use headroom_core::events::Event;
use headroom_core::memory::alloc::CountingAllocator;
use headroom_core::train::{DatasetSource, TrainError};
use headroom_core::{BackendKind, RunLength, RunOptions, TrainConfig, Trainer};
use headroom_datasets::SyntheticConfig;

// The budget guard reads host memory on flex, so this binary counts allocations.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator(std::alloc::System);

const MIB: u64 = 1 << 20;

/// The guard reads the whole process's memory: tests here take turns, so that one test's
/// allocations are not another's out-of-memory.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn config() -> TrainConfig {
    config_on(BackendKind::Flex)
}

fn config_on(backend: BackendKind) -> TrainConfig {
    let mut c = TrainConfig {
        backend,
        micro_batch: 4,
        n_patches: 2,
        accumulation: 1,
        length: RunLength::Steps(6),
        quantizer_warmup_steps: Some(2),
        validation_every_nth_clip: 0,
        ..TrainConfig::default()
    };
    c.dataset = DatasetSource::Synthetic(SyntheticConfig {
        machine_ids: 1,
        train_per_id: 12,
        test_normal_per_id: 1,
        test_anomaly_per_id: 1,
        ..SyntheticConfig::default()
    });
    c
}

fn steps(events: &[Event]) -> Vec<(u64, usize, usize, u64)> {
    headroom_core::events::steps(events)
        .into_iter()
        .map(|s| (s.step, s.micro_batch, s.accumulation, s.mem_peak_bytes))
        .collect()
}

#[test]
fn an_out_of_memory_step_is_redone_at_the_largest_micro_batch_that_fits_and_loses_nothing() {
    // Each patch of this model costs about 2.1-2.4 MiB on flex; 16 spectrograms of 2
    // patches, and a budget 12 MiB under what they reached: about three spectrograms too
    // many. Halving (to 8) would leave a quarter of the budget unused.
    let _alone = alone();
    let (a, short, to) = recovers(config(), 16, 3, 12 * MIB, 1);
    ends_where_a_run_split_by_choice_ends(a, short, 3, to);
}

/// The same on wgpu, over Mesa's software Vulkan driver where there is no GPU: the budget is
/// checked against the device pool there. With the small dcase-ae (about 30 KiB a frame
/// stack there): the run is not planned, so the recovery first calibrates the run's kind of
/// step, which for the default model took over three minutes of lavapipe (2026-11-28) and
/// for dcase-ae takes seconds. That the recovered run ends where a run split by choice ends
/// is the training loop's doing, the same on every backend, and is checked on flex.
///
/// A pool's footprint falls in whole pages as the micro-batch shrinks, which the two
/// calibrated sizes' straight line does not see, so the first re-plan can still be over and
/// the step is redone once more from that reading. Each redo is a dry-run of the smaller
/// micro-batch (the step changed nothing), so a second one costs time, not a step.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_recovers_the_same_way() {
    let _alone = alone();
    let mut config = config_on(BackendKind::Wgpu);
    config.set_model(&headroom_core::model::DcaseAeConfig::default());
    // dcase-ae has no warm-up objective: the model's own default (none), not the default
    // model's two steps that `config_on` sets.
    config.quantizer_warmup_steps = None;
    // A step of 32 spectrograms takes 32 train clips.
    if let DatasetSource::Synthetic(data) = &mut config.dataset {
        data.train_per_id = 40;
    }
    recovers(config, 32, 3, 8 * MIB, 2);
}

/// Run A: `config` at micro-batch `micro_batch`; after step `k - 1` the budget drops to
/// `below` under that step's peak. Step `k` is redone, at most `attempts` times, each time at
/// a smaller micro-batch above half the first; the redone step and the rest of the run must
/// fit the new budget, use at least 85% of it, and keep the effective batch. Returns run A,
/// its configuration, and the micro-batch it recovered to. The caller holds [`alone`].
fn recovers(
    config: TrainConfig,
    micro_batch: usize,
    k: u64,
    below: u64,
    attempts: usize,
) -> (Trainer, TrainConfig, usize) {
    let mut short = config;
    short.micro_batch = micro_batch;
    short.length = RunLength::Steps(k + 2);
    let total = k + 2;
    let budget = Budget::new(0);
    let mut a = Trainer::new(
        short.clone(),
        RunOptions {
            budget: Some(budget.clone()),
            ..RunOptions::default()
        },
    )
    .unwrap();
    let mut events = Vec::new();
    let mut sink = |event: Event| {
        if let Event::Step(s) = &event
            && s.step == k - 1
        {
            budget.set(s.mem_peak_bytes - below);
        }
        events.push(event);
    };
    a.run(&mut sink).unwrap();

    let recoveries: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Recovery(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert!(
        (1..=attempts).contains(&recoveries.len()),
        "{} recoveries, at most {attempts} expected: {recoveries:?}",
        recoveries.len()
    );
    let mut from = micro_batch;
    for (i, r) in recoveries.iter().enumerate() {
        let to = r.to_micro_batch;
        assert_eq!(
            (r.step, r.from_micro_batch, r.in_a_row),
            (k, from, i as u32 + 1)
        );
        assert!(
            to > micro_batch / 2 && to < from,
            "re-planned from {from} to {to}, not above half of {micro_batch}: {recoveries:?}"
        );
        assert_eq!(r.to_accumulation, micro_batch.div_ceil(to));
        assert_eq!(r.effective_batch, micro_batch * short.n_patches);
        from = to;
    }
    let to = from;

    let done = steps(&events);
    assert_eq!(
        done.iter().map(|s| s.0).collect::<Vec<_>>(),
        (1..=total).collect::<Vec<_>>(),
        "every step once, none lost"
    );
    let new_budget = budget.bytes().unwrap();
    for &(step, mb, accumulation, peak) in &done {
        let expected = if step < k {
            (micro_batch, 1)
        } else {
            (to, micro_batch.div_ceil(to))
        };
        assert_eq!((mb, accumulation), expected, "step {step}");
        if step >= k {
            assert!(
                peak <= new_budget,
                "step {step} peaked at {peak} over the budget {new_budget}"
            );
            assert!(
                peak as f64 >= 0.85 * new_budget as f64,
                "step {step} used {peak} of {new_budget}: under 85% after the recovery"
            );
        }
    }
    (a, short, to)
}

/// Run B: run A's first micro-batch for `k - 1` steps, then micro-batch `to` by choice; it
/// must end with run A's parameters.
fn ends_where_a_run_split_by_choice_ends(a: Trainer, short: TrainConfig, k: u64, to: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Trainer::new(
        short,
        RunOptions {
            out_dir: Some(dir.path().to_path_buf()),
            stop_after: Some(k - 1),
            ..RunOptions::default()
        },
    )
    .unwrap();
    b.run(&mut Vec::new()).unwrap();
    let mut b = Trainer::resume(dir.path(), &Default::default(), RunOptions::default()).unwrap();
    b.set_micro_batch(to).unwrap();
    b.run(&mut Vec::new()).unwrap();

    let (pa, pb) = (a.parameters(), b.parameters());
    assert_eq!(pa.len(), pb.len());
    let worst = pa
        .iter()
        .zip(&pb)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "parameters differ by up to {worst}");
}

#[test]
fn a_budget_nothing_fits_in_stops_with_a_checkpoint_and_says_what_to_do() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let budget = Budget::new(0);
    let mut trainer = Trainer::new(
        config(),
        RunOptions {
            out_dir: Some(dir.path().to_path_buf()),
            budget: Some(budget.clone()),
            ..RunOptions::default()
        },
    )
    .unwrap();
    let mut sink = |event: Event| {
        if let Event::Step(s) = &event
            && s.step == 2
        {
            // Below what the model and optimizer alone hold: no micro-batch can fit.
            budget.set(s.mem_allocated_bytes / 2);
        }
    };
    let err = trainer.run(&mut sink).unwrap_err();
    let TrainError::OutOfMemory {
        step, micro_batch, ..
    } = &err
    else {
        panic!("expected out-of-memory, got {err}");
    };
    assert_eq!((*step, *micro_batch), (3, 1));
    let text = err.to_string();
    assert!(
        text.contains("at micro-batch 1 x 2 patches:")
            && text.contains("Step 2 is saved; continue it with resume.")
            && text.contains("Raise the memory budget"),
        "{text}"
    );
    let saved = headroom_core::checkpoint::read_state(dir.path()).unwrap();
    assert_eq!(saved.step, 2, "the last finished step is saved");
}

#[test]
fn a_new_micro_batch_keeps_the_step() {
    let _alone = alone();
    let mut trainer = Trainer::new(config(), RunOptions::default()).unwrap();
    assert!(trainer.set_micro_batch(0).is_err());
    trainer.set_micro_batch(3).unwrap();
    let c = trainer.config();
    assert_eq!(c.split().micro_batch_sizes(), vec![3, 1]);
    assert_eq!((c.accumulation, c.effective_batch()), (2, 8));
}
