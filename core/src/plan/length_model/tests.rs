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
        },
        accumulation_bytes: 1_000_000,
        margin: 0.0,
        pages: None,
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
    assert!(model.peak(&buckets, 64) <= available);
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
