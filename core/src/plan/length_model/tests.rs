//! The length model's fit, its buckets and what packing by them saves.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::*;

/// 40 MB fixed, 1 kB a frame and 100 B a frame squared per example (the fit's test).
fn exact(n: usize, t: usize) -> f64 {
    40e6 + n as f64 * (1e3 * t as f64 + 100.0 * (t * t) as f64)
}

/// 40 MB fixed, 1 kB a frame and 10 B a frame squared per example: 42 MB for one example
/// of 2,000 frames, 0.1 MB for one of 100.
fn model() -> LengthModel {
    let cost = LengthCost {
        fixed: 40e6,
        per_example: 0.0,
        per_frame: 1e3,
        per_frame_squared: 10.0,
        per_length: 0.0,
        per_length_squared: 0.0,
        shortfall: 0.0,
        threads: 1,
    };
    LengthModel {
        bytes: cost,
        seconds: LengthCost {
            fixed: 0.01,
            per_example: 0.0,
            per_frame: 1e-4,
            per_frame_squared: 0.0,
            per_length: 0.0,
            per_length_squared: 0.0,
            shortfall: 0.0,
            threads: 1,
        },
        accumulation_bytes: 1_000_000,
        margin: 0.0,
        pages: None,
        measured: Vec::new(),
        held_input_bytes_per_frame: 0.0,
    }
}

#[test]
fn the_fit_recovers_a_cost_linear_in_examples_and_quadratic_in_frames() {
    let points: Vec<(usize, usize, f64)> = [(1, 2_000), (2, 2_000), (2, 1_000), (4, 500)]
        .iter()
        .map(|&(n, t)| (n, t, exact(n, t)))
        .collect();
    let fit = LengthCost::fit(&points).unwrap();
    for (n, t) in [(1, 100), (30, 300), (3, 3_000)] {
        let (want, got) = (exact(n, t), fit.at(n, t));
        assert!(
            (got - want).abs() <= 1e-6 * want,
            "{n} x {t}: {got} vs {want}: {fit:?}"
        );
    }
}

/// Scratch that grows with the length but not the examples (each thread's, as many at once
/// whatever the examples) is fitted as such, and a cost per example alone would miss it:
/// fitted on the calibration's shapes (one and two of the longest, then more of shorter),
/// the fit predicts a step of many long examples to within a millionth.
#[test]
fn the_fit_recovers_scratch_that_grows_with_the_length_alone() {
    let with_scratch = |n: usize, t: usize| exact(n, t) + 5e3 * t as f64 + 2.0 * (t * t) as f64;
    let points: Vec<(usize, usize, f64)> = [
        (1, 2_000),
        (2, 2_000),
        (2, 1_000),
        (4, 500),
        (8, 250),
        (16, 125),
        (6, 2_000),
        (16, 800),
    ]
    .iter()
    .map(|&(n, t)| (n, t, with_scratch(n, t)))
    .collect();
    let fit = LengthCost::fit(&points).unwrap();
    assert!(
        fit.per_length > 0.0 && fit.per_length_squared > 0.0,
        "{fit:?}"
    );
    for (n, t) in [(12, 2_000), (30, 300), (3, 3_000)] {
        let (want, got) = (with_scratch(n, t), fit.at(n, t));
        assert!(
            (got - want).abs() <= 1e-6 * want,
            "{n} x {t}: {got} vs {want}"
        );
    }
}

/// Noise on the measurements: the fit never predicts below any of them.
#[test]
fn the_fit_is_raised_to_cover_every_measurement() {
    let points: Vec<(usize, usize, f64)> = [(1, 2_000, 1.03), (2, 2_000, 0.98), (2, 1_000, 1.0)]
        .iter()
        .chain(&[(4, 500, 1.05)])
        .map(|&(n, t, noise)| (n, t, exact(n, t) * noise))
        .collect();
    let fit = LengthCost::fit(&points).unwrap();
    assert!(fit.shortfall > 0.0);
    for &(n, t, v) in &points {
        assert!(
            fit.at(n, t) >= v - 1e-6,
            "{n} x {t}: {} < {v}",
            fit.at(n, t)
        );
    }
    // A cost that only grows with the examples is not fitted as negative.
    let flat: Vec<(usize, usize, f64)> = [(1, 100), (2, 100), (2, 50), (4, 25)]
        .iter()
        .map(|&(n, t)| (n, t, 1e6 + n as f64 * 10.0))
        .collect();
    let fit = LengthCost::fit(&flat).unwrap();
    assert!(
        fit.per_frame >= 0.0 && fit.per_frame_squared >= 0.0,
        "{fit:?}"
    );
}

#[test]
fn each_bucket_holds_the_most_examples_that_fit_and_long_ones_hold_fewer() {
    let model = model();
    let lengths: Vec<usize> = (0..400).map(|i| 100 + (i * i) % 1_900).collect();
    let available = 200_000_000;
    let buckets = model.buckets(&lengths, 64, available).unwrap();
    assert!(buckets.buckets.len() > 3, "{buckets:?}");
    let longest = lengths.iter().copied().max().unwrap();
    assert_eq!(buckets.buckets.last().unwrap().frames, longest);
    for pair in buckets.buckets.windows(2) {
        assert!(pair[0].examples >= pair[1].examples, "{buckets:?}");
    }
    for b in &buckets.buckets {
        let accumulating = b.examples < 64;
        assert!(model.step_bytes(b.examples, b.frames, accumulating) <= available);
        if b.examples < 64 {
            assert!(
                model.step_bytes(b.examples + 1, b.frames, true) > available,
                "{b:?} could hold one more"
            );
        }
    }
    assert!(model.peak(&buckets, 64, &lengths) <= available);
}

#[test]
fn a_budget_that_cannot_hold_one_longest_example_is_refused_with_what_it_needs() {
    let model = model();
    let needed = model.buckets(&[100, 2_000], 8, 41_000_000).unwrap_err();
    assert_eq!(needed, model.step_bytes(1, 2_000, true));
    assert!(needed > 41_000_000);
}

/// An epoch's prediction is its steps sorted and packed by the buckets; sorting is what
/// keeps the padding low: the same micro-batch sizes over the steps as drawn pad more.
#[test]
fn an_epoch_is_predicted_over_sorted_packed_steps() {
    let model = model();
    let lengths: Vec<usize> = (0..512).map(|i| 50 + (i * 7919) % 1_950).collect();
    let effective_batch = 32;
    let buckets = model
        .buckets(&lengths, effective_batch, 150_000_000)
        .unwrap();
    let predicted = model.epochs(&buckets, &lengths, effective_batch, 1);
    let (padding, per_s) = (predicted.padding, predicted.examples_per_s);
    let mut shuffled = lengths.clone();
    shuffled.shuffle(&mut ChaCha8Rng::seed_from_u64(0));
    let (mut sorted_padding, mut drawn_padding, mut seconds) =
        (Padding::default(), Padding::default(), 0.0);
    for step in shuffled.chunks(effective_batch) {
        let mut sorted = step.to_vec();
        sorted.sort_unstable();
        let sizes = buckets.pack(&sorted);
        sorted_padding.add(lengths::padding(&sorted, &sizes));
        drawn_padding.add(lengths::padding(step, &sizes));
        let mut first = 0;
        for size in sizes {
            seconds += model.seconds.at(size, sorted[first + size - 1]);
            first += size;
        }
    }
    assert_eq!(padding, sorted_padding);
    assert!((per_s - 512.0 / seconds).abs() < 1e-9 * per_s);
    assert!(
        padding.share() < 0.5 * drawn_padding.share(),
        "sorted {:.3}, as drawn {:.3}",
        padding.share(),
        drawn_padding.share()
    );
}

/// Calibration's shapes on a CPU at a longest of 2,000 frames (`plan::lengths::measuring`).
const CALIBRATION: [(usize, usize); 8] = [
    (1, 2_000),
    (2, 2_000),
    (3, 2_000),
    (2, 1_000),
    (4, 1_000),
    (4, 500),
    (8, 250),
    (16, 125),
];

/// On a CPU of two threads a step of one example takes one thread's scratch and a step of
/// more takes two (`model::cpu_kernels::per_thread`): fitted on calibration's shapes with
/// the threads counted, the fit follows one example and many to within a millionth, where
/// the scratch read as once a step puts one example of the longest a thread's scratch over.
#[test]
fn scratch_is_fitted_per_thread_at_work() {
    let cost = |n: usize, t: usize| exact(n, t) + n.min(2) as f64 * (5e3 * t as f64);
    let points: Vec<(usize, usize, f64)> = CALIBRATION
        .iter()
        .map(|&(n, t)| (n, t, cost(n, t)))
        .collect();
    let fit = LengthCost::fit_on_threads(&points, 2).unwrap();
    for (n, t) in [(1, 3_000), (12, 2_000), (30, 300)] {
        let (want, got) = (cost(n, t), fit.at(n, t));
        assert!(
            (got - want).abs() <= 1e-6 * want,
            "{n} x {t}: {got} vs {want}: {fit:?}"
        );
    }
    let once = LengthCost::fit(&points).unwrap();
    assert!(once.at(1, 2_000) > cost(1, 2_000) + 1e6, "{once:?}");
}

/// A measured step of `n` examples of `t` frames, `bytes` above what was before it.
fn measured(n: usize, t: usize, bytes: f64) -> StepMeasurement {
    StepMeasurement {
        patches: n,
        checkpointing: false,
        precision: crate::precision::Precision::F32,
        peak_bytes: bytes as u64,
        seconds: 0.01 * (n * t) as f64 / 1e3,
        micro_batches: 1,
        frames: Some(t),
        pages: None,
        phases: Vec::new(),
        step_examples: None,
    }
}

/// Calibration's steps, and a wide one a dry-run measured where the cost grows faster (a
/// step's peak moving from the threads' scratch to every activation held): the wide step
/// is not fitted, so steps like calibration's are predicted as before, and it lifts the
/// predictions near it and every wider one to at least itself.
#[test]
fn a_wide_step_measured_corrects_the_fit_near_it_and_bounds_the_wider() {
    let calibration: Vec<StepMeasurement> = CALIBRATION
        .iter()
        .map(|&(n, t)| measured(n, t, exact(n, t)))
        .collect();
    // 20% over the calibration's cost at eight of the longest.
    let wide = measured(8, 2_000, 1.2 * exact(8, 2_000));
    let margin = 0.02;
    let before = LengthModel::fit(&calibration, 0, margin, 2, 0.0).unwrap();
    let with_wide = [calibration.clone(), vec![wide.clone()]].concat();
    let after = LengthModel::fit(&with_wide, 0, margin, 2, 0.0).unwrap();
    assert_eq!(after.bytes, before.bytes, "the wide step is not fitted");
    for (n, t) in [(1, 2_000), (4, 500), (16, 125)] {
        let (b, a) = (
            before.step_bytes(n, t, false),
            after.step_bytes(n, t, false),
        );
        assert!(
            a as f64 <= b as f64 * 1.001,
            "{n} x {t}: {a} after against {b}"
        );
        assert!(b as f64 >= exact(n, t), "{n} x {t}: {b} below the cost");
    }
    assert!(after.step_bytes(8, 2_000, false) as f64 >= wide.peak_bytes as f64 * (1.0 + margin));
    assert!(after.step_bytes(12, 2_500, false) as f64 >= 1.2 * exact(12, 2_500));
    let near = after.step_bytes(7, 2_000, false) as f64 / exact(7, 2_000);
    assert!(
        near > 1.1,
        "seven of the longest predicted at {near} of the fit"
    );
}

/// What each example costs whatever its length (a contrastive model's text tower) shows
/// only in a step of many: calibration's sixteenth as wide as a step is fitted. The steps
/// are speech-clap's calibration on flex, 2 threads (MiB, 2026-12-07): fitted to the eight
/// narrow ones alone, the fit took nothing per pair and came 6.8% short of the wide one.
#[test]
fn calibrations_wide_step_of_short_examples_is_fitted() {
    const SPEECH_CLAP: [(usize, usize, f64); 9] = [
        (1, 2_947, 42.8),
        (2, 2_947, 76.9),
        (3, 2_947, 97.8),
        (2, 1_474, 42.7),
        (4, 1_474, 61.3),
        (4, 737, 35.1),
        (8, 369, 31.4),
        (16, 185, 29.5),
        (64, 185, 91.8),
    ];
    let mib = |v: f64| v * (1u64 << 20) as f64;
    let steps: Vec<StepMeasurement> = SPEECH_CLAP
        .iter()
        .map(|&(n, t, v)| measured(n, t, mib(v)))
        .collect();
    let model = LengthModel::fit(&steps, 0, 0.0, 2, 0.0).unwrap();
    assert!(model.bytes.per_example > 0.0, "{:?}", model.bytes);
    for &(n, t, v) in &SPEECH_CLAP {
        let got = model.bytes.fitted(n, t) / mib(v) - 1.0;
        assert!(got.abs() <= 0.025, "{n} x {t}: fitted {got:+.3} off");
    }
}

/// A step that reads every micro-batch before the first runs holds the others' inputs
/// beside each: its peak is its largest micro-batch with the rest's frames beside it.
#[test]
fn a_step_holding_every_input_is_predicted_with_the_others_inputs() {
    let mut model = model();
    let plain = model.packed_bytes(&[100, 100, 1_000], &[2, 1]);
    model.held_input_bytes_per_frame = 10.0;
    let held = model.packed_bytes(&[100, 100, 1_000], &[2, 1]);
    // The long example's micro-batch is the larger, with the two short ones' 200 frames.
    assert_eq!(held, plain + 2_000);
    // The first of three runs again after the last, beside the middle one's inputs only.
    let first = model.step_bytes(4, 100, true);
    assert_eq!(
        model.packed_bytes(&[100, 100, 100, 100, 110, 120], &[4, 1, 1]),
        first + 1_100,
        "the first beside the middle's 110 frames, not the last's"
    );
    assert_eq!(held_beside(&[400, 110, 120], 0), 110);
    assert_eq!(held_beside(&[400, 110, 120], 1), 0);
    assert_eq!(held_beside(&[400, 110, 120], 2), 510);
    // One micro-batch holds nothing beside itself.
    assert_eq!(
        model.packed_bytes(&[100, 1_000], &[2]),
        model.step_bytes(2, 1_000, false)
    );
}
