//! The search against hand-worked requests: what fits, what is fastest, what is refused.

use super::*;
use crate::plan::memory::MeasuredCost;

const MIB: u64 = 1 << 20;

/// `fixed` MiB plus `per_patch` MiB a patch, as two measured steps.
fn line(fixed: u64, per_patch: u64) -> MeasuredCost {
    MeasuredCost::new([
        (4, ((fixed + 4 * per_patch) * MIB) as f64),
        (16, ((fixed + 16 * per_patch) * MIB) as f64),
    ])
}

fn memory() -> MemoryModel {
    // 20 MiB fixed, 2 MiB per patch; checkpointing halves the per-patch cost.
    MemoryModel {
        plain: line(20, 2),
        checkpointed: Some(line(20, 1)),
        half: None,
        accumulation_bytes: 0,
        margin: 0.0,
    }
}

fn speed() -> SpeedModel {
    SpeedModel {
        micro_batch_s: LinearCost {
            fixed: 0.050,
            per_patch: 0.001,
        },
        checkpointing_factor: 1.25,
        half_s: None,
    }
}

fn request(budget_mib: u64) -> PlanRequest {
    PlanRequest {
        budget_bytes: budget_mib * MIB,
        resident_bytes: 10 * MIB,
        effective_batch: 128,
        fixed: Fixed::default(),
        read_ahead: ReadAhead::NONE,
        preferred_n_patches: None,
        device_cap: None,
    }
}

/// A model whose default cuts 32 patches from each spectrogram (dcase-ae's frame
/// stacks) is planned at 32 where that is as fast, not at 4.
#[test]
fn the_models_patch_count_is_preferred_on_a_tie() {
    let mut r = request(1024);
    r.effective_batch = 512;
    r.fixed.checkpointing = Some(false);
    let flat = SpeedModel {
        micro_batch_s: LinearCost {
            fixed: 0.0,
            per_patch: 0.001,
        },
        ..speed()
    };
    let small = MemoryModel {
        plain: line(1, 0),
        ..memory()
    };
    assert_eq!(search(&small, &flat, &r).unwrap().n_patches, 4);
    r.preferred_n_patches = Some(32);
    let plan = search(&small, &flat, &r).unwrap();
    assert_eq!(
        (plan.micro_batch, plan.n_patches, plan.accumulation),
        (16, 32, 1)
    );
    // A fixed count still wins over the preference.
    r.fixed.n_patches = Some(8);
    assert_eq!(search(&small, &flat, &r).unwrap().n_patches, 8);
}

/// What the stream reads ahead grows with the micro-batch and shares a host budget: with
/// 1 MiB a spectrogram read ahead, two micro-batches ahead, each spectrogram of 4 patches
/// costs 8 + 2 MiB, so the 70 MiB that 100 leaves above 30 fit 7 spectrograms, not 8.
#[test]
fn the_read_ahead_counts_against_the_budget() {
    let mut r = request(100);
    r.fixed.checkpointing = Some(false);
    r.fixed.n_patches = Some(4);
    let plain = search(&memory(), &speed(), &r).unwrap();
    assert_eq!((plain.micro_batch, plain.n_patches), (8, 4));
    r.read_ahead = ReadAhead {
        micro_batches: 2,
        bytes_per_clip: MIB,
        max_clips: 1000,
        reading_bytes: 0,
    };
    let plan = search(&memory(), &speed(), &r).unwrap();
    assert_eq!((plan.micro_batch, plan.n_patches), (7, 4));
    assert_eq!(plan.predicted_peak_bytes, (10 + 20 + 56 + 14) * MIB);
}

#[test]
fn a_large_budget_runs_the_whole_batch_at_once() {
    let plan = search(&memory(), &speed(), &request(1024)).unwrap();
    assert_eq!(
        (plan.micro_batch, plan.n_patches, plan.accumulation),
        (32, 4, 1)
    );
    assert!(!plan.checkpointing);
    assert_eq!(plan.predicted_peak_bytes, (10 + 20 + 256) * MIB);
    assert!(
        plan.reason.contains("fits in one micro-batch"),
        "{}",
        plan.reason
    );
}

#[test]
fn a_tight_budget_accumulates_and_keeps_the_effective_batch() {
    // 100 MiB - 10 resident - 20 fixed leaves 70 MiB: 35 plain patches, 70 checkpointed.
    let plan = search(&memory(), &speed(), &request(100)).unwrap();
    assert_eq!(plan.effective_batch, 128);
    // Full micro-batches and the last one hold the step's 32 spectrograms.
    assert!(plan.micro_batch * (plan.accumulation - 1) < 32);
    assert!(plan.micro_batch * plan.accumulation >= 32);
    assert!(plan.predicted_peak_bytes <= 100 * MIB);
    // Checkpointed 17 x 4 patches ((0.118 + 0.110) x 1.25 s) beat plain 8 x 4 (4 x 0.082 s).
    assert!(plan.checkpointing);
    assert_eq!(
        (plan.micro_batch, plan.n_patches, plan.accumulation),
        (17, 4, 2)
    );
    assert!(plan.reason.contains("the last 15"), "{}", plan.reason);
    assert!(plan.reason.contains("would need"), "{}", plan.reason);
}

#[test]
fn checkpointing_is_not_chosen_when_it_does_not_pay() {
    let slow = SpeedModel {
        checkpointing_factor: 3.0,
        ..speed()
    };
    let plan = search(&memory(), &slow, &request(100)).unwrap();
    assert!(!plan.checkpointing);
    assert_eq!(
        (plan.micro_batch, plan.n_patches, plan.accumulation),
        (8, 4, 4)
    );
}

#[test]
fn a_plan_that_computes_differently_must_be_clearly_faster() {
    // Checkpointed 17 x 4 ((0.118 + 0.110) x 1.37 = 0.312 s) is 5% faster than plain
    // 8 x 4 (0.328 s): within the margin, so the plain plan stays.
    let near = SpeedModel {
        checkpointing_factor: 1.37,
        ..speed()
    };
    let plan = search(&memory(), &near, &request(100)).unwrap();
    assert!(!plan.checkpointing, "{}", plan.reason);
    // Where no plain plan fits, checkpointing is used however slow.
    let mut r = request(100);
    r.fixed.micro_batch = Some(17);
    r.fixed.n_patches = Some(4);
    let plan = search(&memory(), &near, &r).unwrap();
    assert!(plan.checkpointing);
}

#[test]
fn every_fixed_choice_is_kept() {
    let mut r = request(1024);
    r.fixed = Fixed {
        micro_batch: Some(4),
        n_patches: Some(8),
        accumulation: None,
        checkpointing: Some(true),
        ..Fixed::default()
    };
    let plan = search(&memory(), &speed(), &r).unwrap();
    assert_eq!(
        (
            plan.micro_batch,
            plan.n_patches,
            plan.accumulation,
            plan.checkpointing
        ),
        (4, 8, 4, true)
    );
}

#[test]
fn smaller_patch_counts_are_tried_when_one_spectrogram_does_not_fit() {
    // 10 resident + 20 fixed + 2 per patch: 4 patches need 38 MiB, 2 need 34.
    let mut r = request(35);
    r.fixed.checkpointing = Some(false);
    let plan = search(&memory(), &speed(), &r).unwrap();
    assert_eq!((plan.micro_batch, plan.n_patches), (1, 2));
    assert_eq!(plan.accumulation, 64);
}

#[test]
fn any_micro_batch_can_fill_the_budget_and_the_last_takes_the_rest() {
    // 100 clips of 4 patches; 310 MiB - 10 - 20 leaves 280 MiB: 35 spectrograms at once.
    let mut r = request(310);
    r.effective_batch = 400;
    r.fixed.checkpointing = Some(false);
    let plan = search(&memory(), &speed(), &r).unwrap();
    assert_eq!(
        (plan.micro_batch, plan.n_patches, plan.accumulation),
        (35, 4, 3)
    );
    assert!(plan.predicted_peak_bytes <= 310 * MIB);
    assert!(plan.predicted_peak_bytes as f64 >= 0.9 * (310 * MIB) as f64);
}

#[test]
fn half_precision_is_chosen_when_it_fits_a_larger_micro_batch_and_is_not_slower() {
    let mut memory = memory();
    memory.checkpointed = None;
    memory.half = Some(HalfCost {
        precision: Precision::F16,
        cost: line(20, 1),
    });
    let mut speed = speed();
    speed.half_s = Some(HalfCost {
        precision: Precision::F16,
        cost: speed.micro_batch_s,
    });
    let plan = search(&memory, &speed, &request(100)).unwrap();
    assert_eq!(plan.precision, Precision::F16);
    assert!(plan.reason.contains("f16 compute"), "{}", plan.reason);
    // A large budget fits everything in f32, which wins the tie.
    let plan = search(&memory, &speed, &request(1024)).unwrap();
    assert_eq!(plan.precision, Precision::F32);
    // A fixed precision is kept.
    let mut r = request(1024);
    r.fixed.precision = Some(Precision::F16);
    assert_eq!(
        search(&memory, &speed, &r).unwrap().precision,
        Precision::F16
    );
}

#[test]
fn an_impossible_budget_names_the_smallest_step_and_the_numbers() {
    let err = search(&memory(), &speed(), &request(25)).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, PlanError::DoesNotFit { .. }));
    assert!(text.contains("micro-batch 1 x 1 patches"), "{text}");
    assert!(
        text.contains("raise the memory budget or the share of free memory"),
        "{text}"
    );
}

#[test]
fn an_indivisible_effective_batch_is_refused() {
    let mut r = request(1024);
    r.effective_batch = 30;
    r.fixed.n_patches = Some(4);
    let err = search(&memory(), &speed(), &r).unwrap_err();
    assert!(matches!(err, PlanError::Indivisible { .. }), "{err}");
}

/// A device that refused a micro-batch (a buffer over its largest) caps every plan below
/// it, whatever the budget leaves, and the plan's reason says so.
#[test]
fn a_micro_batch_the_device_refused_caps_the_plan() {
    let mut r = request(1024);
    r.fixed.n_patches = Some(4);
    assert_eq!(
        search(&memory(), &speed(), &r).unwrap().micro_batch,
        32,
        "the budget alone holds the whole batch"
    );
    r.device_cap = Some(DeviceCap {
        refused_patches: 128,
        most_patches: 64,
    });
    let plan = search(&memory(), &speed(), &r).unwrap();
    assert_eq!((plan.micro_batch, plan.accumulation), (16, 2));
    assert!(
        plan.reason
            .contains("could not allocate a micro-batch of 128 patches")
            && plan.reason.contains("at most 64"),
        "{}",
        plan.reason
    );
}

#[test]
fn phase_pins_hold_each_phases_micro_batch_for_two_to_four_phases() {
    let pins = PhasePins::of(&[16, 7]);
    assert_eq!(
        (pins.get(0), pins.get(1), pins.get(2)),
        (Some(16), Some(7), None)
    );
    assert!(!pins.is_empty());
    // One phase has nothing to pin apart; more than a request holds pins none.
    assert!(PhasePins::of(&[16]).is_empty());
    assert!(PhasePins::of(&[1, 2, 3, 4, 5]).is_empty());
}
