//! Sums over a row kept in independent lanes, so that they run as vector adds.
//!
//! `iter().sum()` over `f32` is one chain of dependent scalar adds: the compiler may not
//! reorder float additions, so it neither vectorises nor overlaps them. The host kernels'
//! per-row statistics (group and layer norm, a bias's gradient) were such chains: 11.6% of a
//! GAN step at 16 x 4 (perf at 2a9aa0b). Summing `LANES` interleaved partial sums and then
//! the lanes is another fixed order, the same on every run and thread count.

const LANES: usize = 16;

/// `K` sums of `term(a[i], b[i])` over a pair of rows of equal length.
#[inline]
pub fn sums<const K: usize>(a: &[f32], b: &[f32], term: impl Fn(f32, f32) -> [f32; K]) -> [f32; K] {
    let mut lanes = [[0.0f32; LANES]; K];
    let (a_rest, b_rest) = add_chunks(&mut lanes, a, b, &term);
    let mut totals = lanes.map(|lane| lane.iter().sum::<f32>());
    for (&a, &b) in a_rest.iter().zip(b_rest) {
        for (total, t) in totals.iter_mut().zip(term(a, b)) {
            *total += t;
        }
    }
    totals
}

/// Adds the terms of the rows' whole chunks of `LANES` values into `lanes`; returns the
/// rows' remainders.
#[inline]
fn add_chunks<'a, const K: usize>(
    lanes: &mut [[f32; LANES]; K],
    a: &'a [f32],
    b: &'a [f32],
    term: &impl Fn(f32, f32) -> [f32; K],
) -> (&'a [f32], &'a [f32]) {
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let rest = (a_chunks.remainder(), b_chunks.remainder());
    for (a, b) in a_chunks.zip(b_chunks) {
        for lane in 0..LANES {
            let terms = term(a[lane], b[lane]);
            for (sum, t) in lanes.iter_mut().zip(terms) {
                sum[lane] += t;
            }
        }
    }
    rest
}

/// [`sums`] over several pairs of rows, each row's whole chunks kept in the lanes across the
/// rows and its remainder summed apart, reduced once at the end: rows of a few dozen values
/// (batch norm's planes of 4 x 4 to 32 x 32, a channel's over the samples) paid a reduction
/// of the lanes per row.
#[inline]
pub fn sums_over<'a, const K: usize>(
    rows: impl Iterator<Item = (&'a [f32], &'a [f32])>,
    term: impl Fn(f32, f32) -> [f32; K],
) -> [f32; K] {
    let mut lanes = [[0.0f32; LANES]; K];
    let mut rest = [0.0f32; K];
    for (a, b) in rows {
        let (a_rest, b_rest) = add_chunks(&mut lanes, a, b, &term);
        for (&a, &b) in a_rest.iter().zip(b_rest) {
            for (total, t) in rest.iter_mut().zip(term(a, b)) {
                *total += t;
            }
        }
    }
    let mut totals = lanes.map(|lane| lane.iter().sum::<f32>());
    for (total, r) in totals.iter_mut().zip(rest) {
        *total += r;
    }
    totals
}

/// The sum of `term(v)` over a row.
#[inline]
pub fn sum_of(row: &[f32], term: impl Fn(f32) -> f32) -> f32 {
    let [total] = sums(row, row, |v, _| [term(v)]);
    total
}

/// The sum of a row.
#[inline]
pub fn sum(row: &[f32]) -> f32 {
    sum_of(row, |v| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_sums_are_the_sums() {
        // Lengths around the lane count, with a remainder and without.
        for len in [0, 1, 15, 16, 17, 33, 100] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let [dot, total] = sums(&a, &b, |a, b| [a * b, a]);
            let plain_dot: f64 = a.iter().zip(&b).map(|(a, b)| (a * b) as f64).sum();
            let plain_total: f64 = a.iter().map(|&a| a as f64).sum();
            assert!((dot as f64 - plain_dot).abs() < 1e-4, "dot at {len}");
            assert!((total as f64 - plain_total).abs() < 1e-4, "sum at {len}");
            assert!((sum(&a) as f64 - plain_total).abs() < 1e-4, "sum at {len}");
            let squares: f64 = a.iter().map(|&a| (a * a) as f64).sum();
            assert!((sum_of(&a, |v| v * v) as f64 - squares).abs() < 1e-4);
            // The same rows three times over, as one.
            let rows = (0..3).map(|_| (a.as_slice(), b.as_slice()));
            let [dot3, total3] = sums_over(rows, |a, b| [a * b, a]);
            assert!(
                (dot3 as f64 - 3.0 * plain_dot).abs() < 1e-4,
                "dot over rows at {len}"
            );
            assert!(
                (total3 as f64 - 3.0 * plain_total).abs() < 1e-4,
                "sum over rows at {len}"
            );
        }
    }
}
