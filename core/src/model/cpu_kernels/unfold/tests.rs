//! The kernels against direct loops over every (input, output, tap) link.

use super::super::assert_close;
use super::*;

/// Deterministic values in [-1, 1).
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Every (large, small, tap) triple the window connects, by direct loops.
fn links(w: Window) -> Vec<(usize, usize, usize, usize, usize, usize, usize)> {
    let mut out = Vec::new();
    for c in 0..w.channels {
        for ky in 0..w.kernel {
            for kx in 0..w.kernel {
                for sy in 0..w.small[0] {
                    for sx in 0..w.small[1] {
                        let ly = (sy * w.stride + ky) as isize - w.padding as isize;
                        let lx = (sx * w.stride + kx) as isize - w.padding as isize;
                        if ly >= 0
                            && lx >= 0
                            && (ly as usize) < w.large[0]
                            && (lx as usize) < w.large[1]
                        {
                            out.push((c, ky, kx, sy, sx, ly as usize, lx as usize));
                        }
                    }
                }
            }
        }
    }
    out
}

/// A convolution's gradients over `n` samples against direct loops.
fn check_conv_gradients(n: usize, window: Window, out: usize) {
    let cin = window.channels;
    let ([lh, lw], [sh, sw], k) = (window.large, window.small, window.kernel);
    let x = values(n * cin * lh * lw, 1);
    let w = values(out * cin * k * k, 2);
    let dy = values(n * out * sh * sw, 3);
    let (dx, dw) = conv_backward(
        window,
        &x,
        &w,
        &dy,
        out,
        Wanted {
            input: true,
            weight: true,
        },
    );
    let (mut ex, mut ew) = (vec![0.0; x.len()], vec![0.0; w.len()]);
    for b in 0..n {
        for (c, ky, kx, sy, sx, ly, lx) in links(window) {
            for o in 0..out {
                let g = dy[((b * out + o) * sh + sy) * sw + sx];
                let wi = ((o * cin + c) * k + ky) * k + kx;
                let xi = ((b * cin + c) * lh + ly) * lw + lx;
                ew[wi] += g * x[xi];
                ex[xi] += g * w[wi];
            }
        }
    }
    assert_close(&dx.unwrap(), &ex, "dx");
    assert_close(&dw.unwrap(), &ew, "dw");
}

#[test]
fn conv_gradients_match_direct_loops() {
    // A stride-2 3x3 convolution with padding 1 on an odd-sized image.
    let window = Window {
        channels: 4,
        large: [9, 7],
        small: [5, 4],
        kernel: 3,
        stride: 2,
        padding: 1,
    };
    check_conv_gradients(3, window, 5);
    // Runs of several samples side by side (20 positions: runs of 3, the last of 2).
    assert_eq!(Run::of(20, 20).samples, 3);
    check_conv_gradients(20, window, 5);
    // Wide samples (272 positions): runs of 2 multiplied one by one.
    let wide = Window {
        channels: 2,
        large: [33, 32],
        small: [17, 16],
        ..window
    };
    let run = Run::of(10, 272);
    assert_eq!((run.samples, run.together), (2, 1));
    check_conv_gradients(10, wide, 3);
}

/// A transpose convolution's gradients over `n` samples against direct loops; the weight's
/// alone too.
fn check_conv_transpose_gradients(n: usize, window: Window, cin: usize) {
    let cout = window.channels;
    let ([lh, lw], [sh, sw], k) = (window.large, window.small, window.kernel);
    let x = values(n * cin * sh * sw, 4);
    let w = values(cin * cout * k * k, 5);
    let dy = values(n * cout * lh * lw, 6);
    let (dx, dw) = conv_transpose_backward(
        window,
        &x,
        &w,
        &dy,
        cin,
        Wanted {
            input: true,
            weight: true,
        },
    );
    let (mut ex, mut ew) = (vec![0.0; x.len()], vec![0.0; w.len()]);
    for b in 0..n {
        for (o, ky, kx, sy, sx, ly, lx) in links(window) {
            for c in 0..cin {
                let g = dy[((b * cout + o) * lh + ly) * lw + lx];
                let wi = ((c * cout + o) * k + ky) * k + kx;
                let xi = ((b * cin + c) * sh + sy) * sw + sx;
                ew[wi] += g * x[xi];
                ex[xi] += g * w[wi];
            }
        }
    }
    assert_close(&dx.unwrap(), &ex, "dx");
    assert_close(&dw.unwrap(), &ew, "dw");
    let (none, dw_only) = conv_transpose_backward(
        window,
        &x,
        &w,
        &dy,
        cin,
        Wanted {
            input: false,
            weight: true,
        },
    );
    assert!(none.is_none());
    assert_close(&dw_only.unwrap(), &ew, "dw alone");
}

#[test]
fn conv_transpose_gradients_match_direct_loops() {
    // A stride-2 4x4 transpose convolution with padding 1: 5x3 -> 10x6.
    let window = Window {
        channels: 4,
        large: [10, 6],
        small: [5, 3],
        kernel: 4,
        stride: 2,
        padding: 1,
    };
    check_conv_transpose_gradients(2, window, 3);
    // Runs of several samples side by side (15 positions: runs of 3, the last of 2).
    assert_eq!(Run::of(20, 15).samples, 3);
    check_conv_transpose_gradients(20, window, 3);
    // Wide samples (272 positions): runs of 2 multiplied one by one.
    let wide = Window {
        channels: 2,
        large: [34, 32],
        small: [17, 16],
        ..window
    };
    check_conv_transpose_gradients(10, wide, 3);
    // A sample too large to unfold whole (128 rows x 40 x 36 positions): blocks of 14 small
    // rows, the last of 12.
    let large = Window {
        channels: 8,
        large: [80, 72],
        small: [40, 36],
        ..window
    };
    assert_eq!(large.block_rows(Run::of(3, 40 * 36)), 14);
    check_conv_transpose_gradients(3, large, 3);
}

/// A convolution over `n` samples against direct loops.
fn check_conv_forward(n: usize, window: Window, out: usize) {
    let cin = window.channels;
    let ([lh, lw], [sh, sw], k) = (window.large, window.small, window.kernel);
    let x = values(n * cin * lh * lw, 12);
    let w = values(out * cin * k * k, 13);
    let y = conv_forward(window, &x, &w, out, |y| {
        y.iter_mut().for_each(|v| *v -= 0.25)
    });
    let mut expected = vec![-0.25f32; n * out * sh * sw];
    for b in 0..n {
        for (c, ky, kx, sy, sx, ly, lx) in links(window) {
            for o in 0..out {
                let wi = ((o * cin + c) * k + ky) * k + kx;
                let xi = ((b * cin + c) * lh + ly) * lw + lx;
                expected[((b * out + o) * sh + sy) * sw + sx] += w[wi] * x[xi];
            }
        }
    }
    assert_close(&y, &expected, "y");
}

#[test]
fn conv_forward_matches_direct_loops() {
    // A stride-2 3x3 convolution with padding 1 on an odd-sized image.
    let window = Window {
        channels: 4,
        large: [9, 7],
        small: [5, 4],
        kernel: 3,
        stride: 2,
        padding: 1,
    };
    check_conv_forward(3, window, 5);
    // Runs of 3 samples side by side, the last of 2.
    check_conv_forward(20, window, 5);
}

/// A transpose convolution over `n` samples against direct loops.
fn check_conv_transpose_forward(n: usize, window: Window, cin: usize) {
    let cout = window.channels;
    let ([lh, lw], [sh, sw], k) = (window.large, window.small, window.kernel);
    let x = values(n * cin * sh * sw, 10);
    let w = values(cin * cout * k * k, 11);
    let y = conv_transpose_forward(window, &x, &w, cin, |out| {
        out.iter_mut().for_each(|v| *v += 0.5)
    });
    let mut expected = vec![0.5f32; n * cout * lh * lw];
    for b in 0..n {
        for (o, ky, kx, sy, sx, ly, lx) in links(window) {
            for c in 0..cin {
                let wi = ((c * cout + o) * k + ky) * k + kx;
                let xi = ((b * cin + c) * sh + sy) * sw + sx;
                expected[((b * cout + o) * lh + ly) * lw + lx] += w[wi] * x[xi];
            }
        }
    }
    assert_close(&y, &expected, "y");
}

#[test]
fn conv_transpose_forward_matches_direct_loops() {
    // A stride-2 4x4 transpose convolution with padding 1: 5x3 -> 10x6.
    let window = Window {
        channels: 4,
        large: [10, 6],
        small: [5, 3],
        kernel: 4,
        stride: 2,
        padding: 1,
    };
    check_conv_transpose_forward(3, window, 3);
    // Runs of 3 samples side by side, the last of 2.
    check_conv_transpose_forward(20, window, 3);
}

/// The sub-pixel form (one convolution per output phase) wherever the phases split the
/// output exactly, and the product-then-fold form where they do not, both against direct
/// loops.
#[test]
fn conv_transpose_forward_matches_direct_loops_through_phases_and_folds() {
    let transpose = |small: [usize; 2], kernel: usize, stride: usize, padding: usize| Window {
        channels: 3,
        large: small.map(|side| (side - 1) * stride + kernel - 2 * padding),
        small,
        kernel,
        stride,
        padding,
    };
    let phased = [
        transpose([3, 4], 2, 2, 0),
        transpose([4, 3], 4, 2, 0),
        transpose([5, 4], 4, 2, 2),
        transpose([5, 6], 4, 2, 3),
        transpose([3, 4], 6, 3, 0),
        transpose([4, 3], 6, 3, 3),
        transpose([5, 4], 3, 1, 1),
        transpose([17, 16], 4, 2, 1),
    ];
    for window in phased {
        assert!(subpixel::Phases::of(window).is_some(), "{window:?}");
        check_conv_transpose_forward(3, window, 2);
        check_conv_transpose_forward(11, window, 4);
    }
    // Odd outputs at stride 2 (a 3 x 3 kernel), and a kernel not a multiple of the stride.
    for window in [transpose([5, 4], 3, 2, 1), transpose([4, 4], 5, 2, 1)] {
        assert!(subpixel::Phases::of(window).is_none(), "{window:?}");
        check_conv_transpose_forward(3, window, 2);
    }
}

/// The same gradients, bit for bit, on one thread and on three: a run is reproducible.
#[test]
fn gradients_do_not_depend_on_the_thread_count() {
    // Runs of 3 samples side by side, the last of 2.
    let (n, cin, cout) = (20, 3, 4);
    let window = Window {
        channels: cout,
        large: [10, 6],
        small: [5, 3],
        kernel: 4,
        stride: 2,
        padding: 1,
    };
    let x = values(n * cin * 15, 7);
    let w = values(cin * cout * 16, 8);
    let dy = values(n * cout * 60, 9);
    let wanted = Wanted {
        input: true,
        weight: true,
    };
    let on = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| conv_transpose_backward(window, &x, &w, &dy, cin, wanted))
    };
    let (one, three) = (on(1), on(3));
    assert_eq!(one.0.unwrap(), three.0.unwrap());
    assert_eq!(one.1.unwrap(), three.1.unwrap());
}
