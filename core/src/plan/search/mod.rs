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
pub use crate::events::planned::Plan;
use crate::precision::Precision;
use crate::setting::{Described, PlainWords, Setting, Wording};
use crate::size::human as gib;
use crate::split::Split;

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
    /// A task of several phases: each phase's micro-batch, in the task's order (a resumed
    /// run keeps the cuts it was planned with); the phase search takes these instead of
    /// searching.
    #[serde(default, skip_serializing_if = "PhasePins::is_empty")]
    pub phase_micro_batches: PhasePins,
}

/// Each phase's micro-batch, for the first [`PhasePins::PHASES`] phases (0: free). A fixed
/// array, so that a request stays `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PhasePins([usize; PhasePins::PHASES]);

impl PhasePins {
    /// Phases a request can pin: a GAN has two.
    pub const PHASES: usize = 4;

    /// The pins of `micro_batches`, one per phase; none when there are fewer than two, or
    /// more phases than a request can pin.
    pub fn of(micro_batches: &[usize]) -> Self {
        let mut pins = [0; Self::PHASES];
        if (2..=Self::PHASES).contains(&micro_batches.len()) {
            pins[..micro_batches.len()].copy_from_slice(micro_batches);
        }
        Self(pins)
    }

    /// Phase `phase`'s pinned micro-batch.
    pub fn get(&self, phase: usize) -> Option<usize> {
        self.0.get(phase).copied().filter(|&mb| mb > 0)
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&mb| mb == 0)
    }
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
    /// The most patches a micro-batch may hold because the device refused a larger one
    /// whatever the budget (a dry-run's allocation over its largest buffer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_cap: Option<DeviceCap>,
}

/// A ceiling the device itself set on the micro-batch: a dry-run of `refused_patches` failed
/// to allocate (on wgpu no tensor may pass the largest storage buffer: an H200 refused a
/// 2 GiB one, where CUDA has no such limit), so micro-batches hold at most `most_patches`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCap {
    pub refused_patches: usize,
    pub most_patches: usize,
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
    #[error("{}", self.describe(&PlainWords))]
    DoesNotFit {
        smallest: String,
        needed: u64,
        available: u64,
        budget: u64,
        resident: u64,
        /// Planned by length: the longest example, in frames, that a step could hold alone
        /// (`None`: not even the shortest, or a plan of fixed-size examples).
        longest_fitting: Option<usize>,
        /// What one more example adds to the smallest step (0 where unknown): how much of
        /// `needed` the examples hold, so that a task of crops can say how long a crop fits.
        per_example: u64,
    },
}

impl Described for PlanError {
    fn describe(&self, words: &dyn Wording) -> String {
        match self {
            PlanError::DoesNotFit {
                smallest,
                needed,
                available,
                budget,
                resident,
                ..
            } => format!(
                "nothing fits: the smallest step ({smallest}) needs {} but the budget leaves {} \
                 ({} budget, {} already in use); raise {} or {}, free memory on the device, \
                 or use a smaller model",
                gib(*needed),
                gib(*available),
                gib(*budget),
                gib(*resident),
                words.setting(Setting::MemoryBudget),
                words.setting(Setting::MemoryFraction),
            ),
            other => other.to_string(),
        }
    }
}

struct Candidate {
    precision: Precision,
    split: Split,
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
    let mut smallest: Option<(u64, String, u64)> = None;
    let mut any_split = false;
    for &n_patches in &patch_counts {
        if n_patches == 0 || !request.effective_batch.is_multiple_of(n_patches) {
            continue;
        }
        let clips = request.effective_batch / n_patches;
        // Any micro-batch: the last of a step takes the rest, so the largest that fits can
        // be used whatever the effective batch.
        for micro_batch in 1..=clips {
            let split = Split::of_step(clips, micro_batch, n_patches);
            let accumulation = split.accumulation;
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
            if request
                .device_cap
                .is_some_and(|cap| split.patches_per_micro_batch() > cap.most_patches)
            {
                continue;
            }
            let last = split.last_micro_batch();
            for &precision in &precisions {
                for &ckpt in &checkpointing {
                    let patches = split.patches_per_micro_batch();
                    let Some(step) = memory.predict_step(patches, accumulation, precision, ckpt)
                    else {
                        continue;
                    };
                    let needed = step + request.read_ahead.bytes(micro_batch);
                    if smallest.as_ref().is_none_or(|(n, _, _)| needed < *n) {
                        let more = memory.predict_step(patches + 1, accumulation, precision, ckpt);
                        let per_example = more.map_or(0, |more| more.saturating_sub(step));
                        smallest = Some((needed, split.words(ckpt, precision), per_example));
                    }
                    if needed > available {
                        continue;
                    }
                    let step_s = (accumulation - 1) as f64
                        * speed.seconds(patches, precision, ckpt)
                        + speed.seconds(last * n_patches, precision, ckpt);
                    fits.push(Candidate {
                        precision,
                        split,
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
            .position(|&n| n == c.split.n_patches)
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
                std::cmp::Reverse(c.split.patches_per_micro_batch()),
            )
        })
    else {
        let (needed, smallest, per_example) = smallest.unwrap_or((u64::MAX, "any step".into(), 0));
        return Err(PlanError::DoesNotFit {
            smallest,
            needed,
            available,
            budget: request.budget_bytes,
            resident: request.resident_bytes,
            longest_fitting: None,
            per_example,
        });
    };
    let reason = reason(memory, best, request, available);
    Ok(Plan {
        micro_batch: best.split.micro_batch,
        n_patches: best.split.n_patches,
        accumulation: best.split.accumulation,
        checkpointing: best.checkpointing,
        precision: best.precision,
        effective_batch: request.effective_batch,
        predicted_peak_bytes: request.resident_bytes + best.needed,
        budget_bytes: request.budget_bytes,
        predicted_patches_per_s: best.patches_per_s,
        reason,
        lengths: None,
        phases: Vec::new(),
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
    let head = best.split.words(best.checkpointing, best.precision);
    let used = format!(
        "{} of {}",
        gib(request.resident_bytes + best.needed),
        gib(request.budget_bytes)
    );
    if best.split.accumulation == 1 {
        return format!("{head}: the whole effective batch fits in one micro-batch ({used})");
    }
    let fixed = request.fixed.micro_batch.is_some() || request.fixed.accumulation.is_some();
    let next = Some(best.split.micro_batch + 1);
    match next {
        Some(next) if !fixed => {
            let larger = best.split.with_micro_batch(next);
            if let Some(cap) = request
                .device_cap
                .filter(|cap| larger.patches_per_micro_batch() > cap.most_patches)
            {
                return format!(
                    "{head}: the device could not allocate a micro-batch of {} patches, so \
                     micro-batches hold at most {} ({used})",
                    cap.refused_patches, cap.most_patches
                );
            }
            let need = memory
                .predict_step(
                    larger.patches_per_micro_batch(),
                    larger.accumulation,
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
mod tests;
