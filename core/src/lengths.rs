//! Micro-batches by length: for examples of every length (utterances), a plan is
//! a table of length buckets, each with the most examples a micro-batch of its lengths may
//! hold. A step's examples, sorted by length, are packed into micro-batches by it, so short
//! utterances go many at a time and long ones few, and every micro-batch fits. Data only:
//! what a plan carries, what a run's config keeps, and the packing the loop does.

use serde::{Deserialize, Serialize};

mod cost;
pub use cost::LengthCost;

/// Buckets a plan splits the lengths into: finer buckets waste less memory on the short
/// end of each, and each is one more prediction to check.
pub const BUCKETS: usize = 8;

/// The lengths up to `frames` (padded frames per example), at most `examples` of them in a
/// micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LengthBucket {
    pub frames: usize,
    pub examples: usize,
}

impl LengthBucket {
    /// Padded frames of a full micro-batch of this bucket: its frame budget.
    pub fn frame_budget(&self) -> usize {
        self.frames * self.examples
    }
}

/// A length plan: buckets by ascending length, the last holding the run's longest example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthBuckets {
    pub buckets: Vec<LengthBucket>,
    /// Predicted seconds of a micro-batch of `n` examples of `t` padded frames: packing a
    /// step picks, within the caps, the micro-batches of least predicted time (a long
    /// example beside short ones pads them all; another micro-batch costs its fixed part).
    /// `None`: each micro-batch takes as many as its cap allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<LengthCost>,
}

impl LengthBuckets {
    /// The most examples a micro-batch whose longest is `frames` may hold: its bucket's,
    /// or one for an example longer than every bucket (the plan covered the run's longest,
    /// so that is one it was not made for).
    pub fn cap(&self, frames: usize) -> usize {
        self.buckets
            .iter()
            .find(|b| b.frames >= frames)
            .map_or(1, |b| b.examples.max(1))
    }

    /// Micro-batch sizes for a step's examples of `lengths`, sorted ascending: consecutive
    /// runs, each within its longest example's cap; of least predicted time when the plan
    /// predicts time, else each as full as its cap allows.
    pub fn pack(&self, lengths: &[usize]) -> Vec<usize> {
        match &self.seconds {
            Some(seconds) => self.pack_fastest(lengths, seconds),
            None => self.pack_full(lengths),
        }
    }

    fn pack_full(&self, lengths: &[usize]) -> Vec<usize> {
        let mut sizes = Vec::new();
        let mut count = 0;
        for &frames in lengths {
            if count > 0 && count + 1 > self.cap(frames) {
                sizes.push(count);
                count = 0;
            }
            count += 1;
        }
        if count > 0 {
            sizes.push(count);
        }
        sizes
    }

    /// The split of least predicted time, by dynamic programming over the sorted lengths:
    /// `best[j]` is the least time of the first `j` examples, its last micro-batch ending at
    /// `j` and starting where that time is least.
    fn pack_fastest(&self, lengths: &[usize], seconds: &LengthCost) -> Vec<usize> {
        let m = lengths.len();
        let mut best = vec![f64::INFINITY; m + 1];
        let mut start = vec![0usize; m + 1];
        best[0] = 0.0;
        for j in 1..=m {
            let longest = lengths[j - 1];
            let cap = self.cap(longest).min(j);
            for n in 1..=cap {
                let time = best[j - n] + seconds.at(n, longest).max(0.0);
                if time < best[j] {
                    best[j] = time;
                    start[j] = j - n;
                }
            }
        }
        let mut sizes = Vec::new();
        let mut j = m;
        while j > 0 {
            sizes.push(j - start[j]);
            j = start[j];
        }
        sizes.reverse();
        sizes
    }

    /// Whether `plan` allows these buckets: the same lengths, and at each as many examples
    /// or more.
    pub fn within(&self, plan: &LengthBuckets) -> bool {
        self.buckets.len() == plan.buckets.len()
            && self
                .buckets
                .iter()
                .zip(&plan.buckets)
                .all(|(mine, its)| mine.frames == its.frames && mine.examples <= its.examples)
    }

    /// The examples of the longest bucket: what the largest micro-batch of the longest
    /// examples holds.
    pub fn longest_cap(&self) -> usize {
        self.buckets.last().map_or(1, |b| b.examples.max(1))
    }

    /// The bucket whose full micro-batch holds the most padded frames.
    pub fn widest(&self) -> Option<LengthBucket> {
        self.buckets
            .iter()
            .copied()
            .max_by_key(|b| b.frame_budget())
    }

    /// Every cap halved (rounded up): after a micro-batch ran out of memory; `None` when
    /// every bucket is already one example.
    pub fn halved(&self) -> Option<Self> {
        self.buckets.iter().any(|b| b.examples > 1).then(|| Self {
            seconds: self.seconds,
            buckets: self
                .buckets
                .iter()
                .map(|b| LengthBucket {
                    examples: b.examples.div_ceil(2),
                    ..*b
                })
                .collect(),
        })
    }

    /// "1-120 frames: 32, ... 2,000: 3": each bucket's lengths and cap.
    pub fn words(&self) -> String {
        let mut from = 1;
        let parts: Vec<String> = self
            .buckets
            .iter()
            .map(|b| {
                let part = format!("{from}-{} frames: {}", b.frames, b.examples);
                from = b.frames + 1;
                part
            })
            .collect();
        parts.join(", ")
    }
}

/// Most a bucket's longest may be over the next shorter bucket's: a corpus's long tail
/// (the last quantile of a speech corpus spans several times its median) is split further,
/// so that an example a little over the median is not capped as the longest is.
pub const MOST_RATIO: f64 = 1.4;

/// Bucket edges for examples of `lengths`: up to `buckets` quantiles, the last the
/// longest, with edges added where one is more than [`MOST_RATIO`] times the one before;
/// none for no lengths.
pub fn edges(lengths: &[usize], buckets: usize) -> Vec<usize> {
    let mut sorted = lengths.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    let mut quantiles: Vec<usize> = (1..=buckets.max(1))
        .filter_map(|i| {
            let at = (i * n).div_ceil(buckets.max(1));
            at.checked_sub(1).and_then(|at| sorted.get(at).copied())
        })
        .collect();
    quantiles.dedup();
    let mut edges: Vec<usize> = Vec::with_capacity(quantiles.len());
    for edge in quantiles {
        if let Some(&before) = edges.last() {
            // Evenly spaced in ratio: as few added edges as keep each step under the most.
            let ratio = edge as f64 / before.max(1) as f64;
            let added = (ratio.ln() / MOST_RATIO.ln()).ceil() as i32 - 1;
            for i in 1..=added.max(0) {
                let step = ratio.powf(f64::from(i) / f64::from(added + 1));
                let next = (before as f64 * step).round() as usize;
                if next > *edges.last().unwrap_or(&0) && next < edge {
                    edges.push(next);
                }
            }
        }
        edges.push(edge);
    }
    edges
}

/// The micro-batches of `sizes` over `lengths` (sorted, in order), as a step is packed.
pub fn micro_batches<'a>(
    lengths: &'a [usize],
    sizes: &'a [usize],
) -> impl Iterator<Item = &'a [usize]> + 'a {
    let mut rest = lengths;
    sizes.iter().map(move |&size| {
        let (batch, after) = rest.split_at(size.min(rest.len()));
        rest = after;
        batch
    })
}

/// Padded and real frames of micro-batches of `sizes` over `lengths` (sorted, in order).
pub fn padding(lengths: &[usize], sizes: &[usize]) -> Padding {
    let mut padding = Padding::default();
    for batch in micro_batches(lengths, sizes) {
        let longest = batch.iter().copied().max().unwrap_or(0);
        padding.frames += batch.iter().sum::<usize>() as u64;
        padding.padded_frames += (longest * batch.len()) as u64;
    }
    padding
}

/// Frames a step's micro-batches computed: the examples' own and with their padding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Padding {
    pub frames: u64,
    pub padded_frames: u64,
}

impl Padding {
    /// The share of the padded frames that is padding.
    pub fn share(&self) -> f64 {
        if self.padded_frames == 0 {
            0.0
        } else {
            1.0 - self.frames as f64 / self.padded_frames as f64
        }
    }

    pub fn add(&mut self, other: Padding) {
        self.frames += other.frames;
        self.padded_frames += other.padded_frames;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(caps: &[(usize, usize)]) -> LengthBuckets {
        LengthBuckets {
            buckets: caps
                .iter()
                .map(|&(frames, examples)| LengthBucket { frames, examples })
                .collect(),
            seconds: None,
        }
    }

    #[test]
    fn saved_buckets_are_within_a_plan_of_the_same_lengths_and_as_many_examples() {
        let saved = plan(&[(100, 4), (400, 2)]);
        assert!(saved.within(&plan(&[(100, 4), (400, 2)])));
        assert!(saved.within(&plan(&[(100, 64), (400, 3)])));
        assert!(!saved.within(&plan(&[(100, 64), (400, 1)])));
        assert!(!saved.within(&plan(&[(120, 64), (400, 3)])));
        assert!(!saved.within(&plan(&[(100, 64)])));
    }

    #[test]
    fn a_step_packs_short_examples_many_at_a_time_and_long_ones_few() {
        let buckets = plan(&[(100, 4), (400, 2), (1_000, 1)]);
        let lengths = [10, 20, 30, 40, 50, 150, 390, 600, 1_000];
        let sizes = buckets.pack(&lengths);
        // 4 of at most 100 frames; 50 with 150 (the 400-frame bucket's 2); 390 alone, as
        // 600 beside it would be over the 1,000-frame bucket's 1; 600 and 1,000 alone.
        assert_eq!(sizes, vec![4, 2, 1, 1, 1]);
        assert_eq!(sizes.iter().sum::<usize>(), lengths.len());
        let mut start = 0;
        for &size in &sizes {
            let longest = lengths[start + size - 1];
            assert!(size <= buckets.cap(longest), "{size} at {longest}");
            start += size;
        }
        assert_eq!(buckets.cap(5_000), 1, "longer than planned: one at a time");
    }

    /// Packing by predicted time: a costly micro-batch packs as full as the caps allow; a
    /// cheap one leaves a long example apart rather than pad short ones to it.
    #[test]
    fn a_step_is_packed_for_the_least_predicted_time() {
        let lengths = [100, 110, 120, 130, 1_000];
        let mut buckets = plan(&[(200, 8), (1_000, 8)]);
        let time = |fixed: f64| LengthCost {
            fixed,
            per_example: 0.0,
            per_frame: 1e-3,
            per_frame_squared: 0.0,
            per_length: 0.0,
            per_length_squared: 0.0,
            shortfall: 0.0,
            threads: 1,
        };
        buckets.seconds = Some(time(0.1));
        assert_eq!(buckets.pack(&lengths), vec![4, 1], "the long one apart");
        buckets.seconds = Some(time(100.0));
        assert_eq!(
            buckets.pack(&lengths),
            vec![5],
            "one micro-batch when each costs most"
        );
        buckets.seconds = None;
        assert_eq!(buckets.pack(&lengths), vec![5], "as full as the caps allow");
        // Within the caps whatever the time.
        let tight = LengthBuckets {
            seconds: Some(time(100.0)),
            ..plan(&[(200, 2), (1_000, 1)])
        };
        assert_eq!(tight.pack(&lengths), vec![2, 2, 1]);
    }

    #[test]
    fn edges_are_quantiles_ending_at_the_longest_with_the_tail_split() {
        let lengths: Vec<usize> = (1..=100).rev().collect();
        assert_eq!(edges(&lengths, 4), vec![25, 31, 40, 50, 61, 75, 100]);
        let tail: Vec<usize> = [100; 7].into_iter().chain([400]).collect();
        assert_eq!(edges(&tail, 8), vec![100, 132, 174, 230, 303, 400]);
        assert_eq!(edges(&[7, 7, 7], 4), vec![7]);
        assert!(edges(&[], 4).is_empty());
    }

    #[test]
    fn halving_keeps_every_bucket_and_ends_at_one() {
        let buckets = plan(&[(100, 5), (200, 1)]);
        let half = buckets.halved().unwrap();
        assert_eq!(half, plan(&[(100, 3), (200, 1)]));
        assert_eq!(plan(&[(100, 1)]).halved(), None);
    }

    #[test]
    fn padding_counts_each_micro_batch_to_its_longest() {
        let p = padding(&[1, 3, 4, 4], &[2, 2]);
        assert_eq!(p.frames, 12);
        assert_eq!(p.padded_frames, 6 + 8);
        assert!((p.share() - 2.0 / 14.0).abs() < 1e-12);
        assert_eq!(Padding::default().share(), 0.0);
    }
}
