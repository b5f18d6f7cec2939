//! A convolution with one input channel or one output channel (the default model's first
//! layer, 1 -> 32 at stride 2, and its last, 32 -> 1) as filters over planes
//! ([`super::plane`]), forward and both gradients.
//!
//! Unfolded for a GEMM ([`super::unfold`]) such a layer is a product with an inner
//! dimension of 9 (the first) or of a copy 9 times its input (the last: 4.5 MiB a patch,
//! written and read for each pass), and through burn's ops (`model::cpu_forms`) it is a
//! chain of slices, pads and sums that autodiff records one by one: the two layers took
//! about 16% of a 16 x 1 step of the default model for 2% of its multiply-adds
//! (`trainer-cli bench --profile` at ed7ab94). Here each (output channel, input channel)
//! pair is one filter over one plane, as in a depthwise convolution, each input plane split
//! into its phases once per sample and read by every output channel's filters.
//! Written by hand because neither burn nor a crate has such a kernel for flex.

use rayon::prelude::*;

use super::per_thread::{PerThread, outputs_in_groups};
use super::plane::{Plane, Scratch};
use super::sum_partials;
use super::unwritten::Unwritten;

/// Whether a layer of these channels takes this path.
pub fn applies(cin: usize, cout: usize) -> bool {
    cin == 1 || cout == 1
}

/// `y = conv(x, w)` (no bias): `x` is `[n, cin, plane.large]`, `w` is `[cout, cin, k, k]`;
/// returns `[n, cout, plane.small]`. `finish` runs on each sample's output (its bias and
/// activation) in the task that wrote it; the samples are shared over rayon's threads.
pub(super) fn conv_forward(
    plane: Plane,
    x: &[f32],
    w: &[f32],
    [cin, cout]: [usize; 2],
    finish: impl Fn(&mut [f32]) + Sync,
) -> Vec<f32> {
    let (taps, large, small) = (plane.taps(), plane.large_len(), plane.small_len());
    let n = x.len() / (cin * large).max(1);
    let starts = plane.tap_starts();
    outputs_in_groups(n, cout * small, 1, Scratch::default, |i, _, y, scratch| {
        let (phases, flat) = scratch.sized(plane, [cin, 1]);
        plane.split_each(&x[i * cin * large..][..cin * large], phases);
        for (o, y) in y.chunks_mut(small).enumerate() {
            let w = &w[o * cin * taps..][..cin * taps];
            plane.filter_sum(&starts, phases, w, flat);
            plane.crop(flat, y);
        }
        finish(y);
    })
}

/// Gradients of [`conv_forward`] from `dy` (`[n, cout, plane.small]`): the input's when
/// `input`, the weight's when `weight`. Each sample's weight gradient is its own partial
/// sum, the partials added in order: the same gradient on any number of threads.
pub(super) fn conv_backward(
    plane: Plane,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    [cin, cout]: [usize; 2],
    [input, weight]: [bool; 2],
) -> (Option<Vec<f32>>, Option<Vec<f32>>) {
    let (taps, large, small) = (plane.taps(), plane.large_len(), plane.small_len());
    let n = x.len() / (cin * large).max(1);
    let (phases_len, flat_len) = (plane.phases_len(), plane.flat_len());
    let dw_len = cout * cin * taps;
    let sample = |i: usize, dx: Option<&mut [f32]>, dw: Option<&mut [f32]>, s: &mut Scratch| {
        let (phases, flat) = s.sized(plane, [cin, cout]);
        for (dy, flat) in dy[i * cout * small..][..cout * small]
            .chunks(small)
            .zip(flat.chunks_mut(flat_len))
        {
            plane.widen(dy, flat);
        }
        if let Some(dw) = dw {
            plane.split_each(&x[i * cin * large..][..cin * large], phases);
            for (o, flat) in flat.chunks(flat_len).enumerate() {
                for (c, phases) in phases.chunks(phases_len).enumerate() {
                    let dw = &mut dw[(o * cin + c) * taps..][..taps];
                    plane.add_tap_dots(flat, phases, dw);
                }
            }
        }
        if let Some(dx) = dx {
            let gradient = &mut phases[..phases_len];
            for (c, dx) in dx.chunks_mut(large).enumerate() {
                gradient.fill(0.0);
                for (o, flat) in flat.chunks(flat_len).enumerate() {
                    plane.scatter_taps(flat, &w[(o * cin + c) * taps..][..taps], gradient);
                }
                plane.join(gradient, dx);
            }
        }
    };
    let mut dx = input.then(|| Unwritten::new(n * cin * large));
    let mut partials = weight.then(|| Unwritten::new(n * dw_len));
    let scratches = PerThread::new(n, Scratch::default);
    let in_scratch = |i, dx, dw| scratches.with(|s| sample(i, dx, dw, s));
    match (dx.as_mut(), partials.as_mut()) {
        (Some(dx), Some(partials)) => dx
            .par_chunks_mut(cin * large)
            .zip(partials.par_chunks_mut(dw_len))
            .enumerate()
            .for_each(|(i, (dx, dw))| in_scratch(i, Some(dx), Some(dw))),
        (Some(dx), None) => dx
            .par_chunks_mut(cin * large)
            .enumerate()
            .for_each(|(i, dx)| in_scratch(i, Some(dx), None)),
        (None, Some(partials)) => partials
            .par_chunks_mut(dw_len)
            .enumerate()
            .for_each(|(i, dw)| in_scratch(i, None, Some(dw))),
        (None, None) => {}
    }
    (
        dx.map(Unwritten::written),
        partials.map(|p| sum_partials(&p.written(), dw_len)),
    )
}

#[cfg(test)]
mod tests {
    use super::super::assert_close as close;
    use super::*;

    /// The convolution by its definition: every output position's sum over channels and
    /// taps that land inside the input.
    fn direct(plane: Plane, x: &[f32], w: &[f32], [cin, cout]: [usize; 2]) -> Vec<f32> {
        let (k, s, p) = (plane.kernel, plane.stride, plane.padding as isize);
        let [h, wd] = plane.large;
        let [oh, ow] = plane.small;
        let n = x.len() / (cin * h * wd);
        let mut y = vec![0.0f32; n * cout * oh * ow];
        for i in 0..n {
            for o in 0..cout {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut sum = 0.0;
                        for c in 0..cin {
                            for ky in 0..k {
                                for kx in 0..k {
                                    let iy = (oy * s + ky) as isize - p;
                                    let ix = (ox * s + kx) as isize - p;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                        continue;
                                    }
                                    let xi = ((i * cin + c) * h + iy as usize) * wd + ix as usize;
                                    sum += x[xi] * w[((o * cin + c) * k + ky) * k + kx];
                                }
                            }
                        }
                        y[((i * cout + o) * oh + oy) * ow + ox] = sum;
                    }
                }
            }
        }
        y
    }

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 37 + seed * 11) % 101) as f32 - 50.0) * 0.02)
            .collect()
    }

    /// Forward against the definition; both gradients against the definition's
    /// derivatives, probed through `<dy, conv(x, w)>`, which is linear in `x` and in `w`:
    /// its derivative along a unit vector is that vector's output against `dy`.
    #[test]
    fn matches_the_definition() {
        for (side, stride, padding, kernel, channels) in [
            ([8, 8], 2, 1, 3, [1, 4]),
            ([9, 7], 2, 1, 3, [1, 3]),
            ([8, 8], 1, 1, 3, [4, 1]),
            ([7, 9], 1, 0, 3, [3, 1]),
            ([6, 6], 1, 2, 5, [1, 1]),
            ([9, 9], 3, 1, 4, [2, 1]),
        ] {
            let plane = Plane::new(side, kernel, stride, padding);
            let [cin, cout] = channels;
            let n = 3;
            let x = values(n * cin * plane.large_len(), 1);
            let w = values(cout * cin * kernel * kernel, 2);
            let dy = values(n * cout * plane.small_len(), 3);
            let what = format!("{side:?}, stride {stride}, padding {padding}, {channels:?}");
            let y = conv_forward(plane, &x, &w, channels, |_| {});
            close(
                &y,
                &direct(plane, &x, &w, channels),
                &format!("output, {what}"),
            );

            let (dx, dw) = conv_backward(plane, &x, &w, &dy, channels, [true, true]);
            let (dx, dw) = (dx.unwrap(), dw.unwrap());
            let against_dy = |y: Vec<f32>| y.iter().zip(&dy).map(|(a, b)| a * b).sum::<f32>();
            let unit = |len: usize, at: usize| {
                let mut v = vec![0.0f32; len];
                v[at] = 1.0;
                v
            };
            let dx_direct: Vec<f32> = (0..x.len())
                .map(|j| against_dy(direct(plane, &unit(x.len(), j), &w, channels)))
                .collect();
            let dw_direct: Vec<f32> = (0..w.len())
                .map(|j| against_dy(direct(plane, &x, &unit(w.len(), j), channels)))
                .collect();
            close(&dx, &dx_direct, &format!("input gradient, {what}"));
            close(&dw, &dw_direct, &format!("weight gradient, {what}"));

            let (only_dx, none) = conv_backward(plane, &x, &w, &dy, channels, [true, false]);
            assert!(none.is_none());
            assert_eq!(only_dx.unwrap(), dx, "the input gradient alone, {what}");
            let (none, only_dw) = conv_backward(plane, &x, &w, &dy, channels, [false, true]);
            assert!(none.is_none());
            assert_eq!(only_dw.unwrap(), dw, "the weight gradient alone, {what}");
        }
    }
}
