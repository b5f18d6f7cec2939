//! One channel's plane convolved with one k x k filter, a tap at a time: the geometry and
//! the passes shared by the depthwise convolution and the convolutions with one input or
//! one output channel ([`super::thin`]).
//!
//! A plane is worked on as flat rows: the input, padded, is split into `stride x stride`
//! phase planes (rows and columns by their remainder modulo the stride) of `width` columns,
//! so that every tap reads one phase plane at one offset, and the output is laid out
//! `width` wide too. Each tap is then one multiply-add over the whole plane (the columns
//! past the output's are discarded, or zero in a gradient), instead of one short loop per
//! row and a bounds check per tap.

use super::lanes;

/// Output values [`Plane::filter_sum`] keeps in registers at a time: four SSE vectors.
const FILTER_BLOCK: usize = 16;

/// A task's working planes: its inputs' phase planes and its outputs' flat rows.
#[derive(Default)]
pub(super) struct Scratch {
    phases: Vec<f32>,
    flat: Vec<f32>,
}

impl Scratch {
    /// Phase planes for `inputs` input planes and flat rows for `outputs` output planes,
    /// sized for `plane` (their contents are overwritten by each use).
    pub fn sized(
        &mut self,
        plane: Plane,
        [inputs, outputs]: [usize; 2],
    ) -> (&mut [f32], &mut [f32]) {
        self.phases.resize(inputs * plane.phases_len(), 0.0);
        self.flat.resize(outputs * plane.flat_len(), 0.0);
        (&mut self.phases, &mut self.flat)
    }
}

/// One channel's geometry: its input plane (`large`), output plane (`small`), the filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Plane {
    pub large: [usize; 2],
    pub small: [usize; 2],
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
}

impl Plane {
    /// The plane of a `large` input under a `kernel x kernel` filter.
    pub fn new(large: [usize; 2], kernel: usize, stride: usize, padding: usize) -> Self {
        let side = |l: usize| (l + 2 * padding).saturating_sub(kernel) / stride + 1;
        Self {
            large,
            small: large.map(side),
            kernel,
            stride,
            padding,
        }
    }

    pub fn taps(&self) -> usize {
        self.kernel * self.kernel
    }

    pub fn large_len(&self) -> usize {
        self.large[0] * self.large[1]
    }

    pub fn small_len(&self) -> usize {
        self.small[0] * self.small[1]
    }

    /// Columns of a phase plane and of the output's flat rows.
    fn width(&self) -> usize {
        (self.large[1] + 2 * self.padding).div_ceil(self.stride)
    }

    /// Rows of a phase plane: every tap's offset plus the output's flat rows fit.
    fn phase_rows(&self) -> usize {
        (self.large[0] + 2 * self.padding).div_ceil(self.stride) + 1
    }

    fn phase_len(&self) -> usize {
        self.phase_rows() * self.width()
    }

    /// The length of one input's phase planes together.
    pub fn phases_len(&self) -> usize {
        self.stride * self.stride * self.phase_len()
    }

    /// The output's flat length: its rows, `width` wide.
    pub fn flat_len(&self) -> usize {
        self.small[0] * self.width()
    }

    /// Where tap `tap` reads: the start of its run in the phase planes, which is where the
    /// padded input's position `(ky, kx)` lies.
    fn tap_start(&self, tap: usize) -> usize {
        self.at(tap / self.kernel, tap % self.kernel)
    }

    /// Where the padded input's row `r` and column `c` lie in the phase planes.
    fn at(&self, r: usize, c: usize) -> usize {
        let s = self.stride;
        ((r % s) * s + c % s) * self.phase_len() + (r / s) * self.width() + c / s
    }

    /// Where input row `row` goes in the phase planes: for each column phase, the first
    /// input column of that phase, where it lies, and how many there are (every `stride`-th
    /// column from it, side by side there).
    fn row_runs(&self, row: usize) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let (s, p, w) = (self.stride.max(1), self.padding, self.large[1]);
        (0..s.min(w))
            .map(move |first| (first, self.at(row + p, first + p), (w - first).div_ceil(s)))
    }

    /// Writes the padded input `x` into `phases` (`phases_len` long; zero elsewhere).
    // A run per row and column phase, not a place computed per value: the per-value
    // divisions were 13% of an id-classifier step at 16 x 4 (perf at 20a77b0).
    pub fn split(&self, x: &[f32], phases: &mut [f32]) {
        let (s, w) = (self.stride.max(1), self.large[1]);
        phases.fill(0.0);
        for (row, input) in x.chunks(w.max(1)).enumerate() {
            for (first, at, count) in self.row_runs(row) {
                let (run, from) = (&mut phases[at..at + count], &input[first..]);
                // Strides 1 and 2 spelled out: a run-time step is a value at a time.
                match s {
                    1 => run.copy_from_slice(&from[..count]),
                    2 => run
                        .iter_mut()
                        .zip(from.chunks(2))
                        .for_each(|(d, v)| *d = v[0]),
                    _ => run
                        .iter_mut()
                        .zip(from.iter().step_by(s))
                        .for_each(|(d, &v)| *d = v),
                }
            }
        }
    }

    /// [`Plane::split`] for input planes one after another in `x`, into phase planes one
    /// after another in `phases`.
    pub fn split_each(&self, x: &[f32], phases: &mut [f32]) {
        let chunks = x.chunks(self.large_len().max(1));
        for (x, phases) in chunks.zip(phases.chunks_mut(self.phases_len())) {
            self.split(x, phases);
        }
    }

    /// The inverse of [`Plane::split`] for a gradient: each input position's value from
    /// `phases`.
    pub fn join(&self, phases: &[f32], x: &mut [f32]) {
        let (s, w) = (self.stride.max(1), self.large[1]);
        for (row, out) in x.chunks_mut(w.max(1)).enumerate() {
            for (first, at, count) in self.row_runs(row) {
                let (run, to) = (&phases[at..at + count], &mut out[first..]);
                match s {
                    1 => to[..count].copy_from_slice(run),
                    2 => to.chunks_mut(2).zip(run).for_each(|(v, &d)| v[0] = d),
                    _ => to.iter_mut().step_by(s).zip(run).for_each(|(v, &d)| *v = d),
                }
            }
        }
    }

    /// `dy` laid out in flat rows `width` wide (`flat_len` long), zero past the output's
    /// columns.
    pub fn widen(&self, dy: &[f32], flat: &mut [f32]) {
        let (width, columns) = (self.width(), self.small[1]);
        flat.fill(0.0);
        for (row, dy) in flat.chunks_mut(width).zip(dy.chunks(columns.max(1))) {
            row[..columns].copy_from_slice(dy);
        }
    }

    /// The output's values from its flat rows.
    pub fn crop(&self, flat: &[f32], y: &mut [f32]) {
        let columns = self.small[1];
        for (y, row) in y.chunks_mut(columns.max(1)).zip(flat.chunks(self.width())) {
            y.copy_from_slice(&row[..columns]);
        }
    }

    /// `flat += sum over taps of w[tap] * the tap's run of phases`: the filter `w` applied
    /// to one split input, added to flat output rows, a pass over the whole output per tap
    /// (for the depthwise convolution: through [`Plane::filter_sum`]'s blocks the
    /// id-classifier's bench took 1.05x the wall time, medians of 8 and 12 alternated pairs,
    /// `farm-bench --vs`, 2026-11-28).
    pub fn add_taps(&self, phases: &[f32], w: &[f32], flat: &mut [f32]) {
        let flat_len = self.flat_len();
        for (tap, &weight) in w.iter().enumerate() {
            let start = self.tap_start(tap);
            for (out, &x) in flat.iter_mut().zip(&phases[start..start + flat_len]) {
                *out += weight * x;
            }
        }
    }

    /// Where each tap reads in the phase planes, for [`Plane::filter_sum`].
    pub fn tap_starts(&self) -> Vec<usize> {
        (0..self.taps()).map(|tap| self.tap_start(tap)).collect()
    }

    /// `flat = sum over input channels c and taps t of w[c][t] * c's run of phases at t`:
    /// several inputs' filters into one output (`phases` and `w` hold the inputs one after
    /// another; `starts` from [`Plane::tap_starts`]). A block of the output at a time,
    /// summed over every input and tap while it stays in registers, then stored once:
    /// [`Plane::add_taps`] per input loads and stores the whole output for every tap.
    pub fn filter_sum(&self, starts: &[usize], phases: &[f32], w: &[f32], flat: &mut [f32]) {
        let (taps, phases_len, flat_len) = (self.taps(), self.phases_len(), self.flat_len());
        let inputs = || phases.chunks(phases_len).zip(w.chunks(taps));
        let mut blocks = flat[..flat_len].chunks_exact_mut(FILTER_BLOCK);
        for (b, out) in blocks.by_ref().enumerate() {
            let first = b * FILTER_BLOCK;
            let mut sum = [0.0f32; FILTER_BLOCK];
            for (phases, w) in inputs() {
                for (&start, &weight) in starts.iter().zip(w) {
                    let run: &[f32; FILTER_BLOCK] = phases[start + first..][..FILTER_BLOCK]
                        .try_into()
                        .expect("a block's run");
                    for j in 0..FILTER_BLOCK {
                        sum[j] += weight * run[j];
                    }
                }
            }
            out.copy_from_slice(&sum);
        }
        let rest = blocks.into_remainder();
        let first = flat_len - rest.len();
        rest.fill(0.0);
        for (phases, w) in inputs() {
            for (&start, &weight) in starts.iter().zip(w) {
                for (s, &x) in rest.iter_mut().zip(&phases[start + first..]) {
                    *s += weight * x;
                }
            }
        }
    }

    /// The transpose of [`Plane::add_taps`]: each tap's `w[tap] * flat` added back where
    /// the tap read, into phase planes of a gradient.
    pub fn scatter_taps(&self, flat: &[f32], w: &[f32], phases: &mut [f32]) {
        let flat_len = self.flat_len();
        for (tap, &weight) in w.iter().enumerate() {
            let start = self.tap_start(tap);
            for (g, &dy) in phases[start..start + flat_len].iter_mut().zip(flat) {
                *g += weight * dy;
            }
        }
    }

    /// Each tap's weight gradient over one plane added to `dw` (`k * k`): the widened
    /// output gradient `flat` against the tap's run of the split input.
    pub fn add_tap_dots(&self, flat: &[f32], phases: &[f32], dw: &mut [f32]) {
        let flat_len = self.flat_len();
        for (tap, dw) in dw.iter_mut().enumerate() {
            let start = self.tap_start(tap);
            let [dot] = lanes::sums(flat, &phases[start..start + flat_len], |d, x| [d * x]);
            *dw += dot;
        }
    }
}
