//! Micro-batches by length (issue 29): for examples of every length (utterances), a plan is
//! a table of length buckets, each with the most examples a micro-batch of its lengths may
//! hold. A step's examples, sorted by length, are packed into micro-batches by it, so short
//! utterances go many at a time and long ones few, and every micro-batch fits. Data only:
//! what a plan carries, what a run's config keeps, and the packing the loop does.

use serde::{Deserialize, Serialize};

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LengthBuckets {
    pub buckets: Vec<LengthBucket>,
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

    /// Micro-batch sizes for a step's examples of `lengths`, sorted ascending: each
    /// micro-batch takes the next examples while its longest one's cap allows.
    pub fn pack(&self, lengths: &[usize]) -> Vec<usize> {
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

/// Padded and real frames of micro-batches of `sizes` over `lengths` (sorted, in order).
pub fn padding(lengths: &[usize], sizes: &[usize]) -> Padding {
    let mut padding = Padding::default();
    let mut rest = lengths;
    for &size in sizes {
        let (batch, after) = rest.split_at(size.min(rest.len()));
        let longest = batch.iter().copied().max().unwrap_or(0);
        padding.frames += batch.iter().sum::<usize>() as u64;
        padding.padded_frames += (longest * batch.len()) as u64;
        rest = after;
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
        }
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
