//! Samples in [-1, 1] to 8-bit levels and back: mu-law (companded, as SaShiMi's SC09 and
//! WaveNet quantise speech) or linear.

use serde::{Deserialize, Serialize};

/// Levels of an 8-bit sample.
pub const LEVELS: usize = 256;

/// mu-law's mu for 256 levels.
const MU: f32 = (LEVELS - 1) as f32;

/// How samples become levels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Quantizer {
    /// `sign(x) ln(1 + mu |x|) / ln(1 + mu)`, then 256 even steps: fine steps near
    /// silence, where speech spends most of its time.
    #[default]
    MuLaw,
    /// 256 even steps of the sample itself.
    Linear,
}

impl Quantizer {
    /// The level of `sample` (clamped to [-1, 1]; NaN is silence).
    pub fn level(self, sample: f32) -> u8 {
        let x = if sample.is_nan() {
            0.0
        } else {
            sample.clamp(-1.0, 1.0)
        };
        let y = match self {
            Self::MuLaw => x.signum() * (1.0 + MU * x.abs()).ln() / (1.0 + MU).ln(),
            Self::Linear => x,
        };
        // [-1, 1] onto 256 bins of equal width.
        (((y + 1.0) / 2.0 * LEVELS as f32).floor()).clamp(0.0, MU) as u8
    }

    /// The sample a level stands for: its bin's centre, expanded back.
    pub fn sample(self, level: u8) -> f32 {
        let y = (f32::from(level) + 0.5) / LEVELS as f32 * 2.0 - 1.0;
        match self {
            Self::MuLaw => y.signum() * ((1.0 + MU).powf(y.abs()) - 1.0) / MU,
            Self::Linear => y,
        }
    }

    pub fn levels(self, samples: &[f32]) -> Vec<u8> {
        samples.iter().map(|&s| self.level(s)).collect()
    }

    /// The samples `levels` stand for ([`Quantizer::sample`] of each).
    pub fn samples(self, levels: &[u8]) -> Vec<f32> {
        levels.iter().map(|&l| self.sample(l)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_comes_back_as_a_sample_of_the_same_level() {
        for quantizer in [Quantizer::MuLaw, Quantizer::Linear] {
            for level in 0..=255u8 {
                assert_eq!(
                    quantizer.level(quantizer.sample(level)),
                    level,
                    "{quantizer:?}"
                );
            }
        }
    }

    /// mu-law's steps are fine near silence and coarse near full scale; linear's even.
    #[test]
    fn mu_law_resolves_quiet_samples_more_finely() {
        let error = |q: Quantizer, x: f32| (q.sample(q.level(x)) - x).abs();
        assert!(error(Quantizer::MuLaw, 0.0075) < 0.0005);
        assert!(error(Quantizer::Linear, 0.0075) > 0.001);
        assert!(error(Quantizer::MuLaw, 0.9) < 0.02);
        // Silence is the middle of the range; the extremes are the end levels.
        assert_eq!(Quantizer::MuLaw.level(0.0), 128);
        assert_eq!(Quantizer::MuLaw.level(-1.0), 0);
        assert_eq!(Quantizer::MuLaw.level(1.0), 255);
        assert_eq!(Quantizer::MuLaw.level(f32::NAN), 128);
    }
}
