//! `e^x` in f32 as straight-line arithmetic, so that a loop over a row of it runs as vector
//! instructions.
//!
//! `f32::exp` is a call into libm per element: nothing around it vectorises, and in the
//! spectrogram ViT's step the softmax's and GELU gradient's calls were 7.4% of the CPU
//! samples (perf, the classifier's step of 8 x 4 patches). Written by hand because no
//! well-kept crate offers a vectorisable f32 `exp` on stable Rust (sleef's port needs
//! nightly's portable SIMD). Cephes' `expf`: `x = n ln 2 + r` with `|r| <= ln 2 / 2`, a
//! degree-5 polynomial for `e^r`, `2^n` put in the exponent's bits; about 1 ulp where the
//! result is a normal float. Rounding to the nearest `n` adds and subtracts 1.5 x 2^23 rather
//! than calling `floor`, which x86-64's baseline (SSE2) has no instruction for, and `2^n` is
//! read from that sum's bits rather than cast.

/// `e^x`: within 2 ulp of `f32::exp` from -87 to 88; 0 below about -87.7 (where `f32::exp`
/// gives a subnormal), infinity above about 88.4, NaN for NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in two so that `n * LN2_HIGH` is exact for the `n` that occur.
    const LN2_HIGH: f32 = 0.693_359_4;
    const LN2_LOW: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0;
    // Past these 2^n leaves the exponent's range: -127 gives the bits of 0, 128 those of
    // infinity. `clamp` keeps NaN.
    let x = x.clamp(-88.0, 88.8);
    let rounded = x * LOG2_E + ROUND;
    let n = rounded - ROUND;
    let r = x - n * LN2_HIGH - n * LN2_LOW;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    // `n`, a whole number from -127 to 128, is in the low bits of `rounded`'s (above them
    // 1.5 x 2^23's, which the shift drops): read there, since `n as i32` is a saturating
    // conversion that x86 does one lane at a time. For NaN `e_r` is NaN whatever the scale.
    let scale = f32::from_bits(rounded.to_bits().wrapping_add(127) << 23);
    e_r * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i32 - b.to_bits() as i32).unsigned_abs()
    }

    #[test]
    fn within_two_ulp_of_std_where_normal() {
        let mut worst = 0;
        let mut x = -87.0f32;
        while x < 88.0 {
            worst = worst.max(ulps(exp(x), x.exp()));
            x += 0.001_37;
        }
        assert!(worst <= 2, "{worst} ulp");
        for x in [0.0f32, -0.0, 1.0, -1.0, 1e-8, -1e-8] {
            assert!(ulps(exp(x), x.exp()) <= 1, "at {x}");
        }
    }

    #[test]
    fn the_ends_and_nan() {
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(-1e30), 0.0);
        assert!(exp(-87.5) < 1e-37);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
    }
}
