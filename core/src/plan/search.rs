//! The planner's search: the fastest step that fits the budget and keeps the effective batch.
//!
//! A pure function of a measured [`MemoryModel`] and [`SpeedModel`]: the candidates are
//! patches per spectrogram, micro-batch (a divisor of the effective batch, so accumulation is
//! whole) and checkpointing; every choice the user fixed is kept. Throughput is predicted as
//! effective batch / (accumulation x time of one micro-batch), so a larger micro-batch wins
//! while it fits, and checkpointing wins only when it lets a larger micro-batch fit by more
//! than it costs.

use serde::{Deserialize, Serialize};

use super::memory::{HalfCost, LinearCost, MemoryModel};
use super::read_ahead::ReadAhead;
pub use crate::planned::Plan;
use crate::planned::describe;
use crate::precision::Precision;
use crate::size::human as gib;

/// How much faster a checkpointed or half-precision plan must be predicted than the best
/// plain f32 plan that fits, to be chosen over it.
pub const EXOTIC_MARGIN: f64 = 1.10;

/// Patches per spectrogram the planner tries, the first preferred when throughput ties
/// (more spectrograms per step see more of the dataset), after the model's own default.
pub const PATCH_COUNTS: [usize; 5] = [4, 8, 16, 2, 1];

/// Measured time of one micro-batch's forward and backward.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpeedModel {
    /// Seconds in f32, by patches per micro-batch.
    pub micro_batch_s: LinearCost,
    /// Time with checkpointing over time without (seed 001: 1.2-1.3).
    pub checkpointing_factor: f64,
    /// Seconds in mixed precision, when it was measured.
    #[serde(default)]
    pub half_s: Option<HalfCost>,
}

impl SpeedModel {
    /// Seconds of one micro-batch of `patches`.
    pub fn seconds(&self, patches: usize, precision: Precision, checkpointing: bool) -> f64 {
        let line = match precision {
            Precision::F32 => self.micro_batch_s,
            p => self
                .half_s
                .filter(|h| h.precision == p)
                .map_or(self.micro_batch_s, |h| h.cost),
        };
        let factor = if checkpointing {
            self.checkpointing_factor
        } else {
            1.0
        };
        line.at(patches) * factor
    }
}

/// What the user fixed; `None` leaves it to the planner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Fixed {
    pub micro_batch: Option<usize>,
    pub n_patches: Option<usize>,
    pub accumulation: Option<usize>,
    pub checkpointing: Option<bool>,
    #[serde(default)]
    pub precision: Option<Precision>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlanRequest {
    /// The whole budget: free memory x fraction, or the user's `--memory-budget`.
    pub budget_bytes: u64,
    /// Bytes already in use before training (the dataset on a CPU; other programs' memory
    /// is outside the budget already).
    pub resident_bytes: u64,
    /// Patches per optimizer step.
    pub effective_batch: usize,
    pub fixed: Fixed,
    /// What the train stream holds beside the step, by micro-batch (host budgets only).
    #[serde(default)]
    pub read_ahead: ReadAhead,
    /// Tried first and preferred on a tie, when `fixed` leaves the patch count open.
    #[serde(default)]
    pub preferred_n_patches: Option<usize>,
}

impl PlanRequest {
    /// Patches per spectrogram to try, the preferred first.
    fn patch_counts(&self) -> Vec<usize> {
        if let Some(n) = self.fixed.n_patches {
            return vec![n];
        }
        let preferred = self.preferred_n_patches;
        preferred
            .into_iter()
            .chain(PATCH_COUNTS.into_iter().filter(|&n| Some(n) != preferred))
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "the effective batch of {effective_batch} patches cannot be split with {n_patches} \
         patches per spectrogram{fixed}; choose an effective batch that is a multiple of it"
    )]
    Indivisible {
        effective_batch: usize,
        n_patches: usize,
        fixed: String,
    },
    #[error(
        "nothing fits: the smallest step ({smallest}) needs {} but the budget leaves {} \
         ({} budget, {} already in use); raise --memory-budget or --memory-fraction, free \
         memory on the device, or use a smaller model",
        gib(*needed), gib(*available), gib(*budget), gib(*resident)
    )]
    DoesNotFit {
        smallest: String,
        needed: u64,
        available: u64,
        budget: u64,
        resident: u64,
    },
}

struct Candidate {
    precision: Precision,
    micro_batch: usize,
    n_patches: usize,
    accumulation: usize,
    /// Spectrograms in the step's last micro-batch.
    last: usize,
    checkpointing: bool,
    needed: u64,
    patches_per_s: f64,
}

/// Chooses the plan with the highest predicted throughput among those that fit.
pub fn search(
    memory: &MemoryModel,
    speed: &SpeedModel,
    request: &PlanRequest,
) -> Result<Plan, PlanError> {
    let available = request.budget_bytes.saturating_sub(request.resident_bytes);
    let f = request.fixed;
    let patch_counts = request.patch_counts();
    let checkpointing: Vec<bool> = match f.checkpointing {
        Some(c) => vec![c],
        None => vec![false, true],
    };
    let precisions: Vec<Precision> = match f.precision {
        Some(p) => vec![p],
        None => memory.precisions(),
    };
    let mut fits: Vec<Candidate> = Vec::new();
    // The smallest configuration tried, for the error when nothing fits.
    let mut smallest: Option<(u64, String)> = None;
    let mut any_split = false;
    for &n_patches in &patch_counts {
        if n_patches == 0 || !request.effective_batch.is_multiple_of(n_patches) {
            continue;
        }
        let clips = request.effective_batch / n_patches;
        // Any micro-batch: the last of a step takes the rest, so the largest that fits can
        // be used whatever the effective batch.
        for micro_batch in 1..=clips {
            let accumulation = clips.div_ceil(micro_batch);
            if f.micro_batch.is_some_and(|m| m != micro_batch)
                || f.accumulation.is_some_and(|a| a != accumulation)
            {
                continue;
            }
            // With accumulation fixed, the even split is the one the user means.
            if f.accumulation.is_some() && micro_batch != clips.div_ceil(accumulation) {
                continue;
            }
            any_split = true;
            let last = clips - (accumulation - 1) * micro_batch;
            for &precision in &precisions {
                for &ckpt in &checkpointing {
                    let patches = micro_batch * n_patches;
                    let Some(step) = memory.predict_step(patches, accumulation, precision, ckpt)
                    else {
                        continue;
                    };
                    let needed = step + request.read_ahead.bytes(micro_batch);
                    if smallest.as_ref().is_none_or(|(n, _)| needed < *n) {
                        smallest = Some((
                            needed,
                            describe(micro_batch, n_patches, accumulation, last, ckpt, precision),
                        ));
                    }
                    if needed > available {
                        continue;
                    }
                    let step_s = (accumulation - 1) as f64
                        * speed.seconds(patches, precision, ckpt)
                        + speed.seconds(last * n_patches, precision, ckpt);
                    fits.push(Candidate {
                        precision,
                        micro_batch,
                        n_patches,
                        accumulation,
                        last,
                        checkpointing: ckpt,
                        needed,
                        patches_per_s: request.effective_batch as f64 / step_s.max(1e-12),
                    });
                }
            }
        }
    }
    if !any_split {
        let n_patches = patch_counts[0];
        return Err(PlanError::Indivisible {
            effective_batch: request.effective_batch,
            n_patches,
            fixed: fixed_words(&f),
        });
    }
    let preference = |c: &Candidate| {
        let order = patch_counts
            .iter()
            .position(|&n| n == c.n_patches)
            .unwrap_or(patch_counts.len());
        (c.checkpointing, order)
    };
    // Checkpointing or half precision changes the numbers a run computes, so where a plain
    // f32 plan fits, another must be clearly faster (by EXOTIC_MARGIN): timing noise of a
    // few calibration steps on a busy machine must not make two runs with the same flags
    // train differently.
    let plain = |c: &Candidate| !c.checkpointing && c.precision == Precision::F32;
    let plain_rate = fits
        .iter()
        .filter(|c| plain(c))
        .map(|c| c.patches_per_s)
        .fold(0.0, f64::max);
    let eligible = |c: &&Candidate| plain(c) || c.patches_per_s > plain_rate * EXOTIC_MARGIN;
    // Within 3% of the best throughput counts as a tie, for the same reason. Ties go to no
    // checkpointing, f32, the preferred patch count, then the larger micro-batch.
    let best_rate = fits
        .iter()
        .filter(eligible)
        .map(|c| c.patches_per_s)
        .fold(0.0, f64::max);
    let Some(best) = fits
        .iter()
        .filter(eligible)
        .filter(|c| c.patches_per_s >= best_rate * 0.97)
        .min_by_key(|c| {
            let (ckpt, order) = preference(c);
            let half = c.precision != Precision::F32;
            (
                ckpt,
                half,
                order,
                std::cmp::Reverse(c.micro_batch * c.n_patches),
            )
        })
    else {
        let (needed, smallest) = smallest.unwrap_or((u64::MAX, "any step".into()));
        return Err(PlanError::DoesNotFit {
            smallest,
            needed,
            available,
            budget: request.budget_bytes,
            resident: request.resident_bytes,
        });
    };
    let reason = reason(memory, best, request, available);
    Ok(Plan {
        micro_batch: best.micro_batch,
        n_patches: best.n_patches,
        accumulation: best.accumulation,
        checkpointing: best.checkpointing,
        precision: best.precision,
        effective_batch: request.effective_batch,
        predicted_peak_bytes: request.resident_bytes + best.needed,
        budget_bytes: request.budget_bytes,
        predicted_patches_per_s: best.patches_per_s,
        reason,
    })
}

fn fixed_words(f: &Fixed) -> String {
    let mut parts = Vec::new();
    if let Some(m) = f.micro_batch {
        parts.push(format!("micro-batch {m}"));
    }
    if let Some(a) = f.accumulation {
        parts.push(format!("accumulation {a}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" and {} pinned", parts.join(", "))
    }
}

/// Why this plan, in words: what the next larger micro-batch would need, or that the whole
/// effective batch fits at once.
fn reason(memory: &MemoryModel, best: &Candidate, request: &PlanRequest, available: u64) -> String {
    let head = describe(
        best.micro_batch,
        best.n_patches,
        best.accumulation,
        best.last,
        best.checkpointing,
        best.precision,
    );
    let used = format!(
        "{} of {}",
        gib(request.resident_bytes + best.needed),
        gib(request.budget_bytes)
    );
    if best.accumulation == 1 {
        return format!("{head}: the whole effective batch fits in one micro-batch ({used})");
    }
    let fixed = request.fixed.micro_batch.is_some() || request.fixed.accumulation.is_some();
    let next = Some(best.micro_batch + 1);
    match next {
        Some(next) if !fixed => {
            let clips = request.effective_batch / best.n_patches;
            let need = memory
                .predict_step(
                    next * best.n_patches,
                    clips.div_ceil(next),
                    best.precision,
                    best.checkpointing,
                )
                .map_or(u64::MAX, |step| step + request.read_ahead.bytes(next));
            let over = if need > available {
                format!(
                    "{next} would need {} of {}",
                    gib(request.resident_bytes.saturating_add(need)),
                    gib(request.budget_bytes)
                )
            } else {
                format!("{next} fits but is predicted slower")
            };
            format!("{head}: {over} ({used})")
        }
        _ => format!("{head}: as asked ({used})"),
    }
}

#[cfg(test)]
mod tests {
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
            precision: None,
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
        assert!(text.contains("--memory-budget"), "{text}");
    }

    #[test]
    fn an_indivisible_effective_batch_is_refused() {
        let mut r = request(1024);
        r.effective_batch = 30;
        r.fixed.n_patches = Some(4);
        let err = search(&memory(), &speed(), &r).unwrap_err();
        assert!(matches!(err, PlanError::Indivisible { .. }), "{err}");
    }
}
