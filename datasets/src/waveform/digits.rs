//! Spoken digits, SC09's kind of data: one of ten words a clip, spoken by one of several
//! voices of the built-in speech generator ([`crate::speech::synthetic`]), placed in a clip
//! of a fixed length (SC09's 1 s at 16 kHz), with the generator's background noise.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::speech::synthetic::{SpeechConfig, SpeechKey, splits};

/// The ten words, spelt in the generator's letters.
pub const DIGITS: [&str; 10] = [
    "ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE",
];

/// The set's sizes and seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DigitsConfig {
    pub seed: u64,
    pub voices: usize,
    pub train: usize,
    pub validation: usize,
    pub test: usize,
    pub sample_rate: u32,
    /// Samples in a clip (the word centred in it, cut at both ends when longer).
    pub clip_samples: usize,
}

impl Default for DigitsConfig {
    fn default() -> Self {
        Self {
            seed: 9,
            voices: 8,
            train: 400,
            validation: 40,
            test: 80,
            sample_rate: 16_000,
            clip_samples: 16_000,
        }
    }
}

impl DigitsConfig {
    fn speech(&self) -> SpeechConfig {
        SpeechConfig {
            seed: self.seed,
            speakers: self.voices,
            sample_rate: self.sample_rate,
            ..SpeechConfig::default()
        }
    }

    /// Every clip's key: its split, index, voice and word.
    pub fn keys(&self) -> Vec<SpeechKey> {
        let mut keys = Vec::new();
        for (split, count, salt) in splits(self.train, self.validation, self.test) {
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed.wrapping_mul(131) ^ salt);
            for index in 0..count {
                keys.push(SpeechKey {
                    split,
                    index,
                    speaker: rng.random_range(0..self.voices.max(1)),
                    transcript: DIGITS[rng.random_range(0..DIGITS.len())].to_string(),
                });
            }
        }
        keys
    }

    /// The clip of `key`: exactly `clip_samples` samples in [-1, 1], the same for the same
    /// key and seed.
    pub fn clip(&self, key: &SpeechKey) -> Vec<f32> {
        let spoken = self.speech().audio(key).samples;
        let n = self.clip_samples;
        let mut clip = vec![0.0; n];
        if spoken.len() >= n {
            let start = (spoken.len() - n) / 2;
            clip.copy_from_slice(&spoken[start..start + n]);
        } else {
            let start = (n - spoken.len()) / 2;
            clip[start..start + spoken.len()].copy_from_slice(&spoken);
        }
        clip
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::waveform::Quantizer;

    #[test]
    fn every_clip_is_its_length_and_the_same_each_time() {
        let config = DigitsConfig {
            train: 6,
            validation: 2,
            test: 2,
            ..DigitsConfig::default()
        };
        let keys = config.keys();
        assert_eq!(keys.len(), 10);
        for key in &keys {
            let clip = config.clip(key);
            assert_eq!(clip.len(), 16_000, "{key:?}");
            assert_eq!(clip, config.clip(key));
            assert!(clip.iter().all(|s| s.is_finite() && s.abs() <= 1.0));
        }
    }

    /// The set is not one sound: words and voices vary, and a word's clip is mostly not
    /// silence, spread over many levels.
    #[test]
    fn the_clips_differ_by_word_and_voice_and_use_many_levels() {
        let config = DigitsConfig::default();
        let keys = config.keys();
        let words: std::collections::BTreeSet<_> =
            keys.iter().map(|k| k.transcript.as_str()).collect();
        let voices: std::collections::BTreeSet<_> = keys.iter().map(|k| k.speaker).collect();
        assert_eq!(words.len(), 10);
        assert!(voices.len() >= 6, "{voices:?}");
        let levels = Quantizer::MuLaw.levels(&config.clip(&keys[0]));
        let used: std::collections::BTreeSet<_> = levels.iter().collect();
        assert!(used.len() > 100, "{} levels used", used.len());
        let loud = levels
            .iter()
            .filter(|&&l| !(120..=136).contains(&l))
            .count();
        assert!(loud > 2_000, "{loud} samples away from silence");
    }
}
