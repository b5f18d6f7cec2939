//! A stride-s transpose convolution as s x s ordinary convolutions of its input, one per
//! phase of the output (the output positions `s * m + r` for each r, on both axes): the
//! "sub-pixel" form. Each phase reads only k / s taps per axis, so all s x s phases are one
//! GEMM of the weights regathered `[s * s * out, in * (k/s)^2]` by the input unfolded with a
//! (k/s) x (k/s) window at stride 1, then interleaved into the output.
//!
//! The product-then-fold form ([`super::conv_transpose_forward`]'s other path) multiplies
//! with an inner dimension of only the input's channels and writes `k * k` values per input
//! position, folded back after: the default model's last transpose convolution (64 -> 32,
//! 32 x 32 -> 64 x 64) wrote 2 MiB a sample, and its forward took 17% of a training step's
//! op times (`trainer-cli bench --profile` at 16 x 1: 22.9 ms; 13.0 here). Here the inner
//! dimension is `in * (k/s)^2` (256 there) and a sample's product is 0.5 MiB.

use super::super::matrix::{Mat, gemm};
use super::super::per_thread::outputs_in_groups;
use super::{Run, Window};

/// The phases of a transpose convolution whose output splits exactly into them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Phases {
    /// The transpose convolution's own window (large: its output).
    layer: Window,
    /// The window unfolding its input for every phase: (k/s) x (k/s) at stride 1.
    input: Window,
}

impl Phases {
    /// The split of `layer` where it is exact: the kernel a multiple of the stride and each
    /// axis's output a multiple of it too (the default model's and the GAN's 4 x 4 at stride
    /// 2); `None` otherwise.
    pub(super) fn of(layer: Window) -> Option<Self> {
        let (k, s, p) = (layer.kernel, layer.stride, layer.padding);
        if s == 0 || k % s != 0 || layer.large.iter().any(|&side| side % s != 0) {
            return None;
        }
        let taps = k / s;
        let lowest = p / s;
        let padding = (taps - 1).checked_sub(lowest)?;
        let grid = |side: usize| (side + 2 * padding + 1).checked_sub(taps);
        let small = [grid(layer.small[0])?, grid(layer.small[1])?];
        // The last phase's outputs start `shift` positions in and must lie inside the grid.
        let shift = p.div_ceil(s) - lowest;
        let fits = (0..2).all(|axis| shift + layer.large[axis] / s <= small[axis]);
        fits.then_some(Self {
            layer,
            input: Window {
                channels: 0,
                large: layer.small,
                small,
                kernel: taps,
                stride: 1,
                padding,
            },
        })
    }

    fn taps(&self) -> usize {
        self.input.kernel
    }

    /// Where phase `r`'s outputs start in the unfolded grid, and which weight tap its
    /// window's offset `a` reads: output `s * m + r` takes input `m + (r + p) / s - (k/s) +
    /// 1 + a` through tap `(r + p) % s + s * (k/s - 1 - a)`.
    fn shift(&self, r: usize) -> usize {
        let (s, p) = (self.layer.stride, self.layer.padding);
        (r + p) / s - p / s
    }

    fn tap(&self, r: usize, a: usize) -> usize {
        let (s, p) = (self.layer.stride, self.layer.padding);
        (r + p) % s + s * (self.taps() - 1 - a)
    }

    /// The weights `[cin, cout, k, k]` regathered as `[s * s * cout, cin * (k/s)^2]`: row
    /// (phase, output channel), column (input channel, window row, window column), the
    /// order of the unfolded input's rows.
    fn weights(&self, w: &[f32], cin: usize) -> Vec<f32> {
        let (s, k, taps, cout) = (
            self.layer.stride,
            self.layer.kernel,
            self.taps(),
            self.layer.channels,
        );
        let cols = cin * taps * taps;
        let mut out = Vec::with_capacity(s * s * cout * cols);
        // In the product's order, each phase's taps looked up, with no division per value:
        // on the thread that waits for the workers, a division per value took 1.2% of a
        // step's time (perf).
        let tap: Vec<Vec<usize>> = (0..s)
            .map(|r| (0..taps).map(|a| self.tap(r, a)).collect())
            .collect();
        for (ry, rx) in (0..s).flat_map(|ry| (0..s).map(move |rx| (ry, rx))) {
            for o in 0..cout {
                for c in 0..cin {
                    let kernel = &w[(c * cout + o) * k * k..][..k * k];
                    for &ty in &tap[ry] {
                        let row = &kernel[ty * k..][..k];
                        out.extend(tap[rx].iter().map(|&tx| row[tx]));
                    }
                }
            }
        }
        out
    }

    /// One sample's output `[cout, large]` from the phases' product, `[s * s * cout,
    /// grid]` with this sample's grid from column `first` of rows `ld` apart.
    fn interleave(&self, product: &[f32], ld: usize, first: usize, out: &mut [f32]) {
        let (s, cout) = (self.layer.stride, self.layer.channels);
        let [lh, lw] = self.layer.large;
        let [_, gw] = self.input.small;
        let [mh, mw] = [lh / s, lw / s];
        for o in 0..cout {
            let plane = &mut out[o * lh * lw..(o + 1) * lh * lw];
            for (oy, line) in plane.chunks_exact_mut(lw).enumerate().take(mh * s) {
                let (m, ry) = (oy / s, oy % s);
                let grid_row = first + (m + self.shift(ry)) * gw;
                let phase_line = |rx: usize| {
                    let row = (ry * s + rx) * cout + o;
                    let from = row * ld + grid_row + self.shift(rx);
                    &product[from..from + mw]
                };
                if s == 2 {
                    // Pairs, which the compiler turns into vector shuffles.
                    let (even, odd) = (phase_line(0), phase_line(1));
                    for (pair, (e, d)) in line.chunks_exact_mut(2).zip(even.iter().zip(odd)) {
                        pair[0] = *e;
                        pair[1] = *d;
                    }
                    continue;
                }
                for rx in 0..s {
                    for (v, &p) in line[rx..].iter_mut().step_by(s).zip(phase_line(rx)) {
                        *v = p;
                    }
                }
            }
        }
    }
}

/// [`super::conv_transpose_forward`] through the phases: each run of samples is unfolded,
/// multiplied by the regathered weights once, and interleaved into its outputs, then
/// `finish` runs on each output while it is in cache.
pub(super) fn conv_transpose_forward(
    phases: Phases,
    x: &[f32],
    w: &[f32],
    cin: usize,
    finish: impl Fn(&mut [f32]) + Sync,
) -> Vec<f32> {
    let input = Window {
        channels: cin,
        ..phases.input
    };
    let (rows, grid) = (input.rows(), input.positions());
    let (stride, cout) = (phases.layer.stride, phases.layer.channels);
    let product_rows = stride * stride * cout;
    let sample = input.large_len();
    let large = phases.layer.large_len();
    let n = x.len() / sample.max(1);
    let run = Run::of(n, grid);
    let weights = phases.weights(w, cin);
    let weights = Mat::new(&weights, product_rows, rows);
    let columns = run.together * grid;
    let scratch = || {
        (
            vec![0.0f32; rows * columns],
            vec![0.0f32; product_rows * columns],
        )
    };
    outputs_in_groups(
        n,
        large,
        run.together,
        scratch,
        |first, count, out, (cols, product)| {
            let ld = input.unfold_samples(x, first, count, cols);
            let product = &mut product[..product_rows * ld];
            gemm(
                product,
                false,
                weights,
                Mat::new(&cols[..rows * ld], rows, ld),
            );
            for (i, out) in out.chunks_mut(large.max(1)).enumerate() {
                phases.interleave(product, ld, i * grid, out);
                finish(out);
            }
        },
    )
}
