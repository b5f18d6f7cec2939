//! A step's footprint on a device pool that carves allocations from pages sized to its
//! largest allocation (cubecl's adaptive pool, on wgpu and CUDA: a page is the largest
//! allocation served plus a megabyte, rounded up to the megabyte, and pages are held until
//! the pool is emptied). There a footprint is whole pages over what a step holds, one page
//! often a sixth of it, so a polynomial fitted to footprints misses the stairs both ways
//! (bench/speech_inrun on lavapipe, 07a6a32: +22%, and a widest bucket under-predicted).
//! Predicted instead from what follows smoothly from a micro-batch's shape: the bytes in
//! use and the largest allocation, each fitted by length, and the pool's rule for pages.

use serde::{Deserialize, Serialize};

use crate::events::planned::{PagedStep, StepMeasurement};
use crate::lengths::LengthCost;

const MIB: u64 = 1 << 20;

/// The page cubecl's pool carves for an allocation of `bytes` (cubecl-server's
/// `PageSizing::fit`: a megabyte of slack, rounded up to the megabyte).
pub fn page_for(bytes: f64) -> u64 {
    (bytes.max(0.0).ceil() as u64 + MIB).next_multiple_of(MIB)
}

/// What a micro-batch's footprint is on a paged device pool, fitted to steps measured there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PagedBytes {
    /// Bytes in use at a step's sampled phases (after forward, backward, the update).
    pub in_use: LengthCost,
    /// Page bytes per byte in use at the sampled phases: what pages hold beyond those
    /// readings (the peak inside backward, the gaps between slices). The least that gives
    /// every step measured in the largest pages at least the pages it took.
    pub spread: f64,
    /// The spread by length, as (frames, the least that gives every step of those frames
    /// measured in the largest pages the pages it took), shortest first: long examples
    /// fill pages less evenly (more of a step's allocations near a page each, one a page),
    /// so one spread for all lifted shorter steps by a page (the tiny recogniser at 300 MiB
    /// on lavapipe: 4 x 2,947 took 1.2 pages per byte in use, 13 x 1,168 0.99, and a run
    /// predicted 169 MiB reached 137). Empty in a model fitted before it: `spread` then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spreads: Vec<(usize, f64)>,
    /// The largest allocation, fitted to the steps that grew the pool's pages (only they
    /// tell their own: a pool reports the largest it ever served).
    pub largest: Option<LengthCost>,
    /// The largest page measured: a pool's pages never shrink in a process.
    pub page_bytes: u64,
    /// The footprint beside the current pages (the small-allocation pool): the least a
    /// measured step held.
    pub beside_bytes: u64,
}

impl PagedBytes {
    /// The fit to `measurements` (in the order they were measured); `None` unless every one
    /// of them read a paged pool. `held`: bytes a measurement held beside its micro-batch
    /// (a step of several micro-batches: the summed gradients).
    pub fn fit(
        measurements: &[&StepMeasurement],
        held: impl Fn(&StepMeasurement) -> u64,
    ) -> Option<Self> {
        let steps: Vec<(&StepMeasurement, PagedStep)> = measurements
            .iter()
            .filter_map(|m| Some((*m, m.pages?)))
            .collect();
        if steps.is_empty() || steps.len() < measurements.len() {
            return None;
        }
        let shape = |m: &StepMeasurement| (m.patches, m.frames.unwrap_or(1));
        let mut grown = 0;
        // A step that grew the pages tells its largest allocation; one that did not, only
        // that its largest was at most the pool's so far. Calibration grows the pages at the
        // longest length only, where an allocation per example fits as well as one growing
        // with length: the bounds at shorter lengths rule the first out (seed 003's 128 pairs
        // on an H200 or lavapipe: 461 MiB predicted for 119 x 630, which took 66 MiB at most).
        let (mut largest_points, mut largest_bounds) = (Vec::new(), Vec::new());
        for (m, p) in &steps {
            let grew = p.page_bytes > grown;
            grown = grown.max(p.page_bytes);
            let (n, t) = shape(m);
            let point = (n, t, p.largest_allocation_bytes as f64);
            if grew {
                largest_points.push(point);
            } else {
                largest_bounds.push(point);
            }
        }
        let largest = LengthCost::fit_within(&largest_points, &largest_bounds);
        let in_use_points: Vec<(usize, usize, f64)> = steps
            .iter()
            .map(|(m, p)| {
                let (n, t) = shape(m);
                (n, t, p.in_use_bytes.saturating_sub(held(m)) as f64)
            })
            .collect();
        let mut in_use = LengthCost::fit(&in_use_points)?;
        // The spread covers what the fit misses.
        in_use.shortfall = 0.0;
        let used = |m: &StepMeasurement| {
            let (n, t) = shape(m);
            in_use.at(n, t).max(1.0) + held(m) as f64
        };
        // A run's steps are carved from the largest pages planning grew (its dry-runs of the
        // widest buckets), and the steps measured in them say how a run's pages fill: steps
        // in smaller pages fill theirs less evenly (a few pages, each a larger share), and
        // their spread would lift every prediction by a page (bench/speech_inrun on
        // lavapipe: +19% and +31% against 0.0%). A step of another shape that needs more is
        // met by the dry-run, which measures it and refits.
        let page_bytes = steps.iter().map(|(_, p)| p.page_bytes).max()?;
        let in_largest: Vec<&(&StepMeasurement, PagedStep)> = steps
            .iter()
            .filter(|(_, p)| p.page_bytes == page_bytes)
            .collect();
        // A step that took k pages needed more than k - 1 of them.
        let needed = |(m, p): &&(&StepMeasurement, PagedStep)| {
            (p.pages.saturating_sub(1) * p.page_bytes) as f64 / used(m) * (1.0 + 1e-9)
        };
        let least = in_largest.iter().map(needed).fold(0.0, f64::max);
        let mut spreads: Vec<(usize, f64)> = Vec::new();
        if least > 0.0 {
            for step in &in_largest {
                let frames = step.0.frames.unwrap_or(1);
                match spreads.iter_mut().find(|(f, _)| *f == frames) {
                    Some((_, s)) => *s = s.max(needed(step)),
                    None => spreads.push((frames, needed(step))),
                }
            }
            spreads.sort_by_key(|&(frames, _)| frames);
        }
        let spread = if least > 0.0 {
            least
        } else {
            // Every step fitted in one page: the most that keeps each in one.
            in_largest
                .iter()
                .map(|(m, p)| p.page_bytes as f64 / used(m))
                .fold(f64::INFINITY, f64::min)
        };
        Some(Self {
            in_use,
            spread,
            spreads,
            largest,
            page_bytes,
            // The least: a run's steps, in the pages planning grew, hold no outgrown pages
            // beside them (measured steps are made so too: `calibrate`'s regrowth).
            beside_bytes: steps
                .iter()
                .map(|(m, p)| m.peak_bytes.saturating_sub(p.pages * p.page_bytes))
                .min()
                .unwrap_or(0),
        })
    }

    /// The spread for a step of `frames`: the most of the lengths measured up to it (a longer
    /// step fills pages as unevenly as a shorter one, or more), or the shortest measured's
    /// for a step shorter than all.
    pub fn spread_at(&self, frames: usize) -> f64 {
        let Some(&(_, shortest)) = self.spreads.first() else {
            return self.spread;
        };
        self.spreads
            .iter()
            .take_while(|&&(f, _)| f <= frames)
            .map(|&(_, s)| s)
            .fold(shortest, f64::max)
    }

    /// The page a micro-batch of `examples` of `frames` is carved from: the largest the
    /// pool has, or the one its largest allocation grows it to.
    pub fn page(&self, examples: usize, frames: usize) -> u64 {
        let grown = self
            .largest
            .map_or(0, |largest| page_for(largest.at(examples, frames)));
        self.page_bytes.max(grown)
    }

    /// The predicted footprint of a micro-batch of `examples` of `frames`, beside `held`
    /// bytes the step holds (summed gradients). `margin` (relative) on what is beside the
    /// pages, which creeps up by a few kilobytes a step in a run (the runtime's staging
    /// buffers: 24 kB over 10 steps on lavapipe).
    pub fn step_bytes(&self, examples: usize, frames: usize, held: u64, margin: f64) -> u64 {
        self.bytes_at_spread(examples, frames, held, margin, self.spread_at(frames))
    }

    /// [`Self::step_bytes`] with pages filled at `spread` pages per byte in use.
    fn bytes_at_spread(
        &self,
        examples: usize,
        frames: usize,
        held: u64,
        margin: f64,
        spread: f64,
    ) -> u64 {
        let in_use = self.in_use.at(examples, frames).max(1.0) + held as f64;
        let pages_of = |page: u64| (spread * in_use / page as f64).ceil().max(1.0) as u64 * page;
        // A page grown past the pool's takes whole pages of its own size, and the fit of the
        // largest allocation may grow it by a megabyte that the pool did not: fewer, larger
        // pages would then under-predict the step (seed 003's 16 x 2,947 on an H200: 14 pages
        // of 69 MiB predicted, 15 of 68 taken). Never less than the pool's own pages take.
        let pages = pages_of(self.page(examples, frames)).max(pages_of(self.page_bytes));
        (self.beside_bytes as f64 * (1.0 + margin)).ceil() as u64 + pages
    }

    /// After a step of `over` (`held` bytes beside its micro-batch) took more than
    /// `available`: the most examples of its frames, fewer than it held, whose step fits
    /// when its pages are filled as unevenly as `over`'s were. The fitted spread is the least
    /// that covers every step measured, so a shape a few examples narrower than one measured
    /// over is predicted a page under it and measured over again: seed 003's 128 pairs at
    /// 1 GiB on lavapipe went 128, 124, 123, 122 of 630 frames, each 15 pages of 68 MiB where
    /// 14 fit, and found no plan. `None` when `over` read no pool or carries no length.
    pub fn most_after_over(
        &self,
        over: &StepMeasurement,
        held: u64,
        margin: f64,
        available: u64,
    ) -> Option<usize> {
        let (pool, frames) = (over.pages?, over.frames?);
        let used = self.in_use.at(over.patches, frames).max(1.0) + held as f64;
        let taken = (pool.pages * pool.page_bytes) as f64 / used;
        let spread = self.spread_at(frames).max(taken);
        Some(super::most_that_fits(
            over.patches.saturating_sub(1),
            |examples| self.bytes_at_spread(examples, frames, held, margin, spread) <= available,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::Precision;

    /// A pool that follows cubecl's rule: the largest allocation 2.5 kB a padded frame, its
    /// page that plus a megabyte, rounded; 2 MB in use whatever the shape and 20 kB a padded
    /// frame; pages for 1.1 times what is in use (what the readings miss); 10 MB beside.
    fn pool(n: usize, t: usize, page: u64) -> (u64, PagedStep) {
        let in_use = 2e6 + 2e4 * (n * t) as f64;
        let largest = 2.5e3 * (n * t) as f64;
        let page = page.max(page_for(largest));
        let pages = (1.1 * in_use / page as f64).ceil() as u64;
        let step = PagedStep {
            page_bytes: page,
            pages,
            largest_allocation_bytes: largest as u64,
            in_use_bytes: in_use as u64,
        };
        (10_000_000 + pages * page, step)
    }

    /// Calibration's shapes in its order, each in the pages the ones before it grew.
    fn calibrated(longest: usize) -> Vec<StepMeasurement> {
        let mut page = 0;
        [
            (1, longest),
            (2, longest),
            (2, longest / 2),
            (4, longest / 4),
            (8, longest / 8),
        ]
        .into_iter()
        .map(|(n, t)| {
            let (peak, step) = pool(n, t, page);
            page = step.page_bytes;
            StepMeasurement {
                patches: n,
                checkpointing: false,
                precision: Precision::F32,
                peak_bytes: peak,
                seconds: 0.1,
                micro_batches: 1,
                frames: Some(t),
                pages: Some(step),
                phases: Vec::new(),
                step_examples: None,
            }
        })
        .collect()
    }

    #[test]
    fn pages_follow_cubecls_rule() {
        assert_eq!(page_for(0.0), MIB);
        assert_eq!(page_for(1.0), 2 * MIB);
        assert_eq!(page_for((7 * MIB) as f64), 8 * MIB);
        assert_eq!(page_for((7 * MIB + 1) as f64), 9 * MIB);
    }

    /// In the pages planning grew (where a run carves its steps), a step measured there is
    /// predicted at or above what it took, and every other shape, a wider one than any
    /// measured included, within a page of what the pool takes for it (the spread comes
    /// from few steps, so another shape may need a page more: the dry-run measures that).
    /// A wider micro-batch grows the page as its largest allocation asks.
    #[test]
    fn the_fit_gives_each_shape_its_pages_and_grows_pages_with_the_shape() {
        let measured = calibrated(3_000);
        let all: Vec<&StepMeasurement> = measured.iter().collect();
        let paged = PagedBytes::fit(&all, |_| 0).unwrap();
        for m in measured
            .iter()
            .filter(|m| m.pages.unwrap().page_bytes == paged.page_bytes)
        {
            let got = paged.step_bytes(m.patches, m.frames.unwrap(), 0, 0.0);
            assert!(
                got >= m.peak_bytes,
                "{} x {:?}: {got} against {}",
                m.patches,
                m.frames,
                m.peak_bytes
            );
        }
        let wider = (16, 1_500);
        let shapes = measured.iter().map(|m| (m.patches, m.frames.unwrap()));
        for (n, t) in shapes.chain([wider]) {
            let (want, step) = pool(n, t, paged.page_bytes);
            assert_eq!(paged.page(n, t), step.page_bytes, "{n} x {t}");
            let got = paged.step_bytes(n, t, 0, 0.0);
            assert!(
                got.abs_diff(want) <= step.page_bytes,
                "{n} x {t}: {got} against {want}"
            );
        }
        assert!(paged.page(wider.0, wider.1) > paged.page_bytes);
    }

    /// Calibration grows the pages at the longest length only; the steps after, shorter and
    /// wider, did not grow them, so their largest allocation was at most the pool's: the
    /// fit of the largest allocation keeps under those and grows with length, where one per
    /// example would put a short micro-batch's page far past any measured.
    #[test]
    fn the_largest_allocation_grows_with_length_under_the_steps_that_grew_nothing() {
        let measured = calibrated(3_000);
        let all: Vec<&StepMeasurement> = measured.iter().collect();
        let paged = PagedBytes::fit(&all, |_| 0).unwrap();
        let largest = paged.largest.unwrap();
        for m in &measured[2..] {
            let (n, t) = (m.patches, m.frames.unwrap());
            let pool = m.pages.unwrap();
            assert!(largest.at(n, t) <= pool.largest_allocation_bytes as f64 * (1.0 + 1e-9));
            assert_eq!(paged.page(n, t), paged.page_bytes, "{n} x {t}");
        }
        // A wide micro-batch of short examples: the pool's 2.5 kB a padded frame.
        let (n, t) = (64, 300);
        let want = 2.5e3 * (n * t) as f64;
        assert!(
            largest.at(n, t) <= 1.01 * want,
            "{} against {want}",
            largest.at(n, t)
        );
    }

    /// The tiny recogniser planned at 300 MiB on lavapipe (bench/speech_inrun at 9e5ae2b):
    /// calibration's seven steps, then six dry-runs in pages of 32 MiB. Its steps of 2,947
    /// frames took 1.07 and 1.2 pages per byte in use, those of 1,168 and 1,590 at most 0.99;
    /// one spread for all put every shorter step a page high (13 x 1,168: 265 MiB predicted,
    /// 233 taken). By length, each shorter step measured there is predicted its own pages.
    #[test]
    fn a_step_is_predicted_the_pages_its_own_length_fills() {
        let steps: Vec<StepMeasurement> =
            serde_json::from_str(include_str!("../testdata/lavapipe_asr_tiny_300mib.json"))
                .expect("the measured steps parse");
        let gradients = 883_032;
        let held = |m: &StepMeasurement| if m.micro_batches > 1 { gradients } else { 0 };
        let all: Vec<&StepMeasurement> = steps.iter().collect();
        let paged = PagedBytes::fit(&all, held).unwrap();
        assert_eq!(paged.page_bytes, 32 * MIB);
        let in_largest = steps
            .iter()
            .filter(|m| m.pages.is_some_and(|p| p.page_bytes == paged.page_bytes));
        for m in in_largest {
            let (n, t) = (m.patches, m.frames.unwrap());
            // The planner's margin on what is beside the pages (a few kB apart between steps).
            let got = paged.step_bytes(n, t, held(m), 0.02);
            // Its own pages below 2,947 frames; at 2,947 within the page 4 x 2,947 needs more.
            let over = if t < 2_947 {
                MIB
            } else {
                paged.page_bytes + 2 * MIB
            };
            assert!(
                got >= m.peak_bytes && got - m.peak_bytes < over,
                "{n} x {t}: {got} predicted, {} taken",
                m.peak_bytes
            );
        }
        // A length between those measured takes the spread of the longest at or under it.
        assert_eq!(paged.spread_at(2_000), paged.spread_at(1_590));
        assert!(paged.spread_at(2_947) > paged.spread_at(1_590));
        assert_eq!(paged.spread_at(100), paged.spread_at(1_168));
    }

    /// A measurement that read no pool (a CPU's) leaves the model to the polynomial.
    #[test]
    fn no_paged_fit_unless_every_step_read_pages() {
        let mut measured = calibrated(2_000);
        measured[2].pages = None;
        let all: Vec<&StepMeasurement> = measured.iter().collect();
        assert!(PagedBytes::fit(&all, |_| 0).is_none());
    }
}
