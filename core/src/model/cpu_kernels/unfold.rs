//! The gradients of a convolution and of a transpose convolution as two GEMMs per sample
//! around one unfolded matrix, on plain `f32` slices in NCHW order.
//!
//! Both layers relate a "large" image (a convolution's input, a transpose convolution's
//! output) to a "small" grid of positions (the other side) through a k x k window moved by
//! `stride` with `padding`. Unfolding the large image gives a matrix with one row per
//! (channel, tap row, tap column) and one column per small-grid position, the order of the
//! weights' flattening. burn computes a weight gradient as a convolution with batch and
//! channels swapped, whose GEMMs have 9-16 rows; here it is one GEMM per sample whose inner
//! dimension is the number of positions, and the input gradient reuses the same unfolded
//! matrix (transpose convolution) or folds one GEMM back (convolution).

use rayon::prelude::*;

use super::matrix::{Mat, gemm, gemm_block};
use super::per_thread::outputs_in_groups;
use super::unwritten::Unwritten;
use runs::{Run, Scratch};

/// How a k x k window maps a large image onto a small grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Channels of the large image.
    pub channels: usize,
    pub large: [usize; 2],
    pub small: [usize; 2],
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
}

impl Window {
    fn rows(&self) -> usize {
        self.channels * self.kernel * self.kernel
    }

    fn positions(&self) -> usize {
        self.small[0] * self.small[1]
    }

    fn large_len(&self) -> usize {
        self.channels * self.large[0] * self.large[1]
    }

    /// The small positions along `axis` whose tap `k` lands inside the large image.
    fn inside(&self, k: usize, axis: usize) -> std::ops::Range<usize> {
        let (s, p, large, small) = (
            self.stride,
            self.padding,
            self.large[axis],
            self.small[axis],
        );
        // First s with s * stride + k >= p, and first s with s * stride + k >= p + large.
        let first = (p.saturating_sub(k)).div_ceil(s).min(small);
        let end = (p + large).saturating_sub(k).div_ceil(s).min(small);
        first..end.max(first)
    }

    /// `[rows, positions]` from one sample's large image, row r at `out[r * ld..]` (`ld`
    /// at least `positions`: a run's samples side by side in one matrix).
    pub fn unfold(&self, large: &[f32], out: &mut [f32], ld: usize) {
        self.unfold_rows(large, out, ld, 0..self.small[0]);
    }

    /// [`Window::unfold`]'s columns of the small rows `small_rows` only, row r at
    /// `out[r * ld..]`.
    fn unfold_rows(
        &self,
        large: &[f32],
        out: &mut [f32],
        ld: usize,
        small_rows: std::ops::Range<usize>,
    ) {
        let [lh, lw] = self.large;
        let sw = self.small[1];
        let (k, stride) = (self.kernel, self.stride.max(1));
        // At a stride above 1 a tap reads every `stride`-th column of a row, and the k taps
        // of a window row read the same row at k offsets: each plane is first split by column
        // phase (column mod stride, each phase contiguous), once, so that every tap's line
        // is one contiguous copy where it was a strided gather (perf at af9247a: unfolding
        // 15.5% of a GAN step at 16 x 4; 9.2% after).
        let phase_len = |r: usize| lw.saturating_sub(r).div_ceil(stride);
        let phase_start: Vec<usize> = (0..stride)
            .scan(0, |start, r| {
                let here = *start;
                *start += phase_len(r);
                Some(here)
            })
            .collect();
        let mut split = if stride > 1 {
            vec![0.0f32; lh * lw]
        } else {
            Vec::new()
        };
        // The large rows that the small rows' windows read.
        let end = ((small_rows.end * stride + k).saturating_sub(self.padding + stride)).min(lh);
        let needed = (small_rows.start * stride)
            .saturating_sub(self.padding)
            .min(end)..end;
        for c in 0..self.channels {
            let plane = &large[c * lh * lw..(c + 1) * lh * lw];
            let phased: &[f32] = if stride > 1 {
                let lines = needed.start * lw..needed.end * lw;
                let (src, dst) = (&plane[lines.clone()], &mut split[lines]);
                for (src, dst) in src.chunks_exact(lw).zip(dst.chunks_exact_mut(lw)) {
                    if stride == 2 {
                        // Pairs, which the compiler turns into vector shuffles (without this
                        // branch a GAN step at 16 x 4 ran 1.6% and 5.9% slower, medians of
                        // 10 and 8 paired whole-process runs at 6d06289, spread +-20%).
                        let (evens, odds) = dst.split_at_mut(phase_start[1]);
                        for ((e, o), pair) in evens.iter_mut().zip(odds).zip(src.chunks_exact(2)) {
                            *e = pair[0];
                            *o = pair[1];
                        }
                        if lw % 2 == 1 {
                            evens[lw / 2] = src[lw - 1];
                        }
                        continue;
                    }
                    for (r, &start) in phase_start.iter().enumerate() {
                        let phase = &mut dst[start..start + phase_len(r)];
                        for (d, &x) in phase.iter_mut().zip(src[r..].iter().step_by(stride)) {
                            *d = x;
                        }
                    }
                }
                &split
            } else {
                plane
            };
            for ky in 0..k {
                let rows_inside = self.inside(ky, 0);
                for kx in 0..k {
                    let cols_inside = self.inside(kx, 1);
                    let row = (c * k + ky) * k + kx;
                    let dst = &mut out[row * ld..row * ld + small_rows.len() * sw];
                    // The first column inside reads large column `lx0`, then every
                    // `stride`-th one: phase lx0 % stride from its (lx0 / stride)-th value.
                    let lx0 = (cols_inside.start * stride + kx).saturating_sub(self.padding);
                    let from = phase_start[lx0 % stride] + lx0 / stride;
                    for (sy, line) in small_rows.clone().zip(dst.chunks_exact_mut(sw)) {
                        if !rows_inside.contains(&sy) || cols_inside.is_empty() {
                            line.fill(0.0);
                            continue;
                        }
                        let ly = sy * stride + ky - self.padding;
                        let src = &phased[ly * lw..(ly + 1) * lw];
                        line[..cols_inside.start].fill(0.0);
                        line[cols_inside.end..].fill(0.0);
                        let inner = &mut line[cols_inside.clone()];
                        inner.copy_from_slice(&src[from..from + inner.len()]);
                    }
                }
            }
        }
    }

    /// Small rows per block where one sample's unfolded matrix would outgrow a core's cache:
    /// unfolded and multiplied a block at a time, so that its two products read it from
    /// cache; every row where it fits, or where a run is several samples.
    fn block_rows(&self, run: Run) -> usize {
        let row_len = self.rows() * self.small[1];
        if run.together > 1 || row_len == 0 {
            return self.small[0];
        }
        (BLOCK_VALUES / row_len).clamp(1, self.small[0].max(1))
    }

    /// Samples `first..first + count` of `images` (one large image each) unfolded side by
    /// side into `cols`, sample i's rows from column `i * positions`; returns the matrix's
    /// width, `count * positions`.
    fn unfold_samples(
        &self,
        images: &[f32],
        first: usize,
        count: usize,
        cols: &mut [f32],
    ) -> usize {
        let (large, positions) = (self.large_len(), self.positions());
        let ld = count * positions;
        for i in 0..count {
            let b = first + i;
            self.unfold(
                &images[b * large..(b + 1) * large],
                &mut cols[i * positions..],
                ld,
            );
        }
        ld
    }

    /// Adds `[rows, positions]`, row r at `cols[r * ld..]`, back onto one sample's large
    /// image (the adjoint of [`Window::unfold`]); `large` must start zeroed.
    pub fn fold(&self, cols: &[f32], ld: usize, large: &mut [f32]) {
        let [lh, lw] = self.large;
        let (k, stride) = (self.kernel, self.stride);
        let row_of = |c: usize, ky: usize, kx: usize| {
            let row = (c * k + ky) * k + kx;
            &cols[row * ld..row * ld + self.positions()]
        };
        for c in 0..self.channels {
            let plane = &mut large[c * lh * lw..(c + 1) * lh * lw];
            for ky in 0..k {
                let mut kx = 0;
                while kx < k {
                    // At stride 2 two neighbouring taps write neighbouring columns: added as
                    // pairs, one contiguous pass where two strided ones were.
                    if stride == 2 && kx + 1 < k {
                        let pair = [row_of(c, ky, kx), row_of(c, ky, kx + 1)];
                        self.fold_pair(pair, ky, kx, plane);
                        kx += 2;
                    } else {
                        self.fold_tap(row_of(c, ky, kx), ky, kx, plane, None);
                        kx += 1;
                    }
                }
            }
        }
    }

    /// Adds tap (ky, kx)'s row of the unfolded matrix onto its plane, at the small columns
    /// `only` (all inside the image when `None`).
    fn fold_tap(
        &self,
        src: &[f32],
        ky: usize,
        kx: usize,
        plane: &mut [f32],
        only: Option<std::ops::Range<usize>>,
    ) {
        let lw = self.large[1];
        let sw = self.small[1];
        let stride = self.stride;
        let cols_inside = only.unwrap_or_else(|| self.inside(kx, 1));
        if cols_inside.is_empty() {
            return;
        }
        // As in `unfold`: the columns inside, every `stride`-th large column from `lx0`,
        // without a bounds test per element.
        let lx0 = cols_inside.start * stride + kx - self.padding;
        for sy in self.inside(ky, 0) {
            let ly = sy * stride + ky - self.padding;
            let dst = &mut plane[ly * lw + lx0..(ly + 1) * lw];
            let line = &src[sy * sw..(sy + 1) * sw][cols_inside.clone()];
            if stride == 1 {
                for (d, v) in dst.iter_mut().zip(line) {
                    *d += v;
                }
            } else {
                for (d, v) in dst.iter_mut().step_by(stride).zip(line) {
                    *d += v;
                }
            }
        }
    }

    /// Taps (ky, kx) and (ky, kx + 1) at stride 2: where both are inside, each small column
    /// writes two neighbouring large ones; the rest tap by tap.
    fn fold_pair(&self, [a, b]: [&[f32]; 2], ky: usize, kx: usize, plane: &mut [f32]) {
        let lw = self.large[1];
        let sw = self.small[1];
        let (a_inside, b_inside) = (self.inside(kx, 1), self.inside(kx + 1, 1));
        let both = a_inside.start.max(b_inside.start)..a_inside.end.min(b_inside.end);
        if both.is_empty() {
            self.fold_tap(a, ky, kx, plane, None);
            self.fold_tap(b, ky, kx + 1, plane, None);
            return;
        }
        for (src, tap, inside) in [(a, kx, a_inside), (b, kx + 1, b_inside)] {
            let before = inside.start..both.start.max(inside.start);
            let after = both.end.min(inside.end).max(inside.start)..inside.end;
            for part in [before, after] {
                if !part.is_empty() {
                    self.fold_tap(src, ky, tap, plane, Some(part));
                }
            }
        }
        let lx0 = both.start * 2 + kx - self.padding;
        for sy in self.inside(ky, 0) {
            let ly = sy * 2 + ky - self.padding;
            let dst = &mut plane[ly * lw + lx0..(ly + 1) * lw];
            let a = &a[sy * sw..(sy + 1) * sw][both.clone()];
            let b = &b[sy * sw..(sy + 1) * sw][both.clone()];
            // Tap kx + 1 is inside at every column of `both`, so `dst` holds every pair.
            for (d, (a, b)) in dst.chunks_exact_mut(2).zip(a.iter().zip(b)) {
                d[0] += a;
                d[1] += b;
            }
        }
    }
}

/// An unfolded block's values at most (see [`Window::block_rows`]).
const BLOCK_VALUES: usize = 64 * 1024;

/// Which gradients to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    pub input: bool,
    pub weight: bool,
}

/// Gradients of a convolution `y = conv(x, w)` (no bias): `x` is `[n, window.channels,
/// large]`, `w` is `[out, rows]`, `dy` is `[n, out, small]`. Returns (dx, dw).
pub fn conv_backward(
    window: Window,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    out: usize,
    wanted: Wanted,
) -> (Option<Vec<f32>>, Option<Vec<f32>>) {
    let (rows, positions, large) = (window.rows(), window.positions(), window.large_len());
    let n = x.len() / large;
    let run = Run::of(n, positions);
    let mut dx = wanted.input.then(|| Unwritten::new(n * large));
    let weight = Mat::new(w, out, rows);
    let per_group =
        |first: usize, count: usize, dx: Option<&mut [f32]>, dw: &mut [f32], s: &mut Scratch| {
            let ld = count * positions;
            let grad = side_by_side(
                &mut s.other,
                &dy[first * out * positions..],
                out,
                positions,
                count,
            );
            let grad = Mat::new(grad, out, ld);
            if wanted.weight {
                window.unfold_samples(x, first, count, &mut s.cols);
                // Transposed, `dw^T += cols grad^T`: see `transposed`.
                gemm(dw, true, Mat::new(&s.cols[..rows * ld], rows, ld), grad.t());
            }
            if let Some(dx) = dx {
                gemm(&mut s.cols[..rows * ld], false, weight.t(), grad);
                for (i, dx) in dx.chunks_mut(large).enumerate() {
                    window.fold(&s.cols[i * positions..], ld, dx);
                }
            }
        };
    let dw = run.over_batch(
        n,
        large,
        || Scratch::sized(rows, out, run, positions),
        out * rows,
        dx.as_mut(),
        per_group,
    );
    (
        dx.map(Unwritten::written),
        wanted.weight.then(|| transposed(&dw, rows, out)),
    )
}

/// `[cols, rows]` of a row-major `[rows, cols]`.
///
/// The weight gradients are summed transposed, `dw^T (+)= unfolded @ other^T`: the `gemm`
/// crate computes a row-major destination as its transpose and packs the product's right
/// side as its left, so `dw (+)= other @ unfolded^T` had it repack the whole unfolded matrix
/// (rows x positions) across its layout for every sample, where this packs `other` (a few
/// channels x positions): `pack_lhs` was 14.5% of a GAN step (perf at 7609f26).
fn transposed(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = Unwritten::new(values.len());
    let transpose = |(c, column): (usize, &mut [f32])| {
        for (v, row) in column.iter_mut().zip(values.chunks_exact(cols.max(1))) {
            *v = row[c];
        }
    };
    // A row of the result per task where the matrix is large (on one thread, the other
    // waited: perf); a small one on this thread, where the pool's hand-off costs more.
    if values.len() < 4 * super::CHUNK {
        out.par_chunks_mut(rows.max(1))
            .enumerate()
            .with_min_len(cols.max(1))
            .for_each(transpose);
    } else {
        out.par_chunks_mut(rows.max(1))
            .enumerate()
            .for_each(transpose);
    }
    out.written()
}

/// Gradients of a transpose convolution `y = conv_transpose(x, w)` (no bias): `x` is
/// `[n, cin, small]`, `w` is `[cin, rows]` (rows over the output's channels), `dy` is
/// `[n, window.channels, large]`. Returns (dx, dw).
pub fn conv_transpose_backward(
    window: Window,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    cin: usize,
    wanted: Wanted,
) -> (Option<Vec<f32>>, Option<Vec<f32>>) {
    let (rows, positions, large) = (window.rows(), window.positions(), window.large_len());
    let n = dy.len() / large;
    let run = Run::of(n, positions);
    let sample = cin * positions;
    let mut dx = wanted.input.then(|| Unwritten::new(n * sample));
    let weight = Mat::new(w, cin, rows);
    let block = window.block_rows(run);
    let per_group =
        |first: usize, count: usize, dx: Option<&mut [f32]>, dw: &mut [f32], s: &mut Scratch| {
            if count == 1 && block < window.small[0] {
                let sw = window.small[1];
                let x = &x[first * sample..(first + 1) * sample];
                let dy = &dy[first * large..(first + 1) * large];
                let mut dx = dx;
                for start in (0..window.small[0]).step_by(block) {
                    let rows_here = start..(start + block).min(window.small[0]);
                    let ld = rows_here.len() * sw;
                    window.unfold_rows(dy, &mut s.cols, ld, rows_here.clone());
                    let unfolded = Mat::new(&s.cols[..rows * ld], rows, ld);
                    if wanted.weight {
                        let input = Mat::strided(&x[start * sw..], cin, ld, positions);
                        gemm(dw, true, unfolded, input.t());
                    }
                    if let Some(dx) = dx.as_deref_mut() {
                        gemm_block(&mut dx[start * sw..], positions, weight, unfolded);
                    }
                }
                return;
            }
            let ld = window.unfold_samples(dy, first, count, &mut s.cols);
            let unfolded = Mat::new(&s.cols[..rows * ld], rows, ld);
            if wanted.weight {
                let input = side_by_side(&mut s.other, &x[first * sample..], cin, positions, count);
                // Transposed, `dw^T += unfolded input^T`: see `transposed`.
                gemm(dw, true, unfolded, Mat::new(input, cin, ld).t());
            }
            if let Some(dx) = dx {
                product_apart(weight, unfolded, &mut s.other, dx, positions);
            }
        };
    let dw = run.over_batch(
        n,
        sample,
        // A block's columns where the sample is unfolded a block at a time.
        || Scratch::sized(rows, cin, run, block * window.small[1]),
        cin * rows,
        dx.as_mut(),
        per_group,
    );
    (
        dx.map(Unwritten::written),
        wanted.weight.then(|| transposed(&dw, rows, cin)),
    )
}

/// A convolution `y = conv(x, w)` (no bias): `x` is `[n, window.channels, large]`, `w` is
/// `[out, rows]`; returns `[n, out, small]`. Each run of samples (see [`Run`]) is unfolded
/// and multiplied by the weight (one GEMM), then `finish` runs on each sample's output (its
/// bias and activation) while it is in cache; the runs are shared over rayon's threads.
pub fn conv_forward(
    window: Window,
    x: &[f32],
    w: &[f32],
    out: usize,
    finish: impl Fn(&mut [f32]) + Sync,
) -> Vec<f32> {
    let (rows, positions, large) = (window.rows(), window.positions(), window.large_len());
    let n = x.len() / large.max(1);
    let run = Run::of(n, positions);
    let sample = out * positions;
    let weight = Mat::new(w, out, rows);
    outputs_in_groups(
        n,
        sample,
        run.together,
        || Scratch::sized(rows, out, run, positions),
        |first, count, y, s| {
            let ld = window.unfold_samples(x, first, count, &mut s.cols);
            let cols = Mat::new(&s.cols[..rows * ld], rows, ld);
            product_apart(weight, cols, &mut s.other, y, positions);
            y.chunks_mut(sample.max(1)).for_each(&finish);
        },
    )
}

/// A transpose convolution `y = conv_transpose(x, w)` (no bias): `x` is `[n, cin, small]`,
/// `w` is `[cin, rows]`; returns `[n, window.channels, large]`. By output phase where the
/// stride divides the kernel and the output ([`subpixel`]); otherwise each run of samples'
/// products of every input position with every tap (`w^T x`, one GEMM) are folded onto each
/// sample's output. `finish` runs on each output (its bias and activation) while it is in
/// cache; the runs are shared over rayon's threads.
pub fn conv_transpose_forward(
    window: Window,
    x: &[f32],
    w: &[f32],
    cin: usize,
    finish: impl Fn(&mut [f32]) + Sync,
) -> Vec<f32> {
    if let Some(phases) = subpixel::Phases::of(window) {
        return subpixel::conv_transpose_forward(phases, x, w, cin, finish);
    }
    let (rows, positions, large) = (window.rows(), window.positions(), window.large_len());
    let sample = cin * positions;
    let n = x.len() / sample.max(1);
    let run = Run::of(n, positions);
    let weight = Mat::new(w, cin, rows);
    outputs_in_groups(
        n,
        large,
        run.together,
        || Scratch::sized(rows, cin, run, positions),
        |first, count, out, s| {
            let ld = count * positions;
            let input = side_by_side(&mut s.other, &x[first * sample..], cin, positions, count);
            let cols = &mut s.cols[..rows * ld];
            gemm(cols, false, weight.t(), Mat::new(input, cin, ld));
            for (i, out) in out.chunks_mut(large.max(1)).enumerate() {
                window.fold(&cols[i * positions..], ld, out);
                finish(out);
            }
        },
    )
}

/// `lhs @ rhs` for a group of samples side by side (`rhs` `count * positions` wide), each
/// sample's `[channels, positions]` written into `samples`: directly for one sample, else
/// through `scratch` (the inverse of [`side_by_side`]).
fn product_apart(lhs: Mat, rhs: Mat, scratch: &mut [f32], samples: &mut [f32], positions: usize) {
    let [channels, ld] = [lhs.shape()[0], rhs.shape()[1]];
    if ld == positions {
        gemm(samples, false, lhs, rhs);
        return;
    }
    let all = &mut scratch[..channels * ld];
    gemm(all, false, lhs, rhs);
    for (i, sample) in samples.chunks_mut(channels * positions).enumerate() {
        for (c, row) in sample.chunks_mut(positions).enumerate() {
            row.copy_from_slice(&all[c * ld + i * positions..][..positions]);
        }
    }
}

/// `count` samples of `[channels, positions]` from `from` as one `[channels, count *
/// positions]` matrix in `into`: the samples themselves when there is one.
fn side_by_side<'a>(
    into: &'a mut [f32],
    from: &'a [f32],
    channels: usize,
    positions: usize,
    count: usize,
) -> &'a [f32] {
    if count == 1 {
        return &from[..channels * positions];
    }
    let ld = count * positions;
    for (i, sample) in from.chunks(channels * positions).take(count).enumerate() {
        for (c, row) in sample.chunks(positions).enumerate() {
            into[c * ld + i * positions..][..positions].copy_from_slice(row);
        }
    }
    &into[..channels * ld]
}

mod runs;
mod subpixel;
#[cfg(test)]
mod tests;
