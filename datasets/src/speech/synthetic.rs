//! The built-in speech-like corpus: utterances with transcripts, deterministic from a seed,
//! that a transcription model can learn in a few CPU minutes and that are long where real
//! corpora are long.
//!
//! Each letter of a small alphabet is a sound of its own: a vowel-like tone (the speaker's
//! pitch and its harmonics, shaped by two formants on a grid far wider apart than any
//! speaker shifts them) or a fricative-like hiss in a band of its own; a space is a short
//! pause. Speakers' formants overlap at the grid's edges, so some letters are confused, as
//! some sounds are. Words come from a fixed lexicon of pseudo-words, sentences from a lognormal number
//! of words, so utterances run from under a second to 20 s and more with a long tail, as
//! LibriSpeech's do. Speakers differ in pitch, speaking rate and timbre (their formants
//! moved together by a few percent); every utterance has background noise at its own level.

use std::f64::consts::TAU;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::audio::Audio;

/// The letters the corpus speaks, besides the space: 20 vowel-like, 4 fricative-like.
pub const LETTERS: &str = "AEIOUBDGKLMNPRTVWYZHSFXC";
/// How many of [`LETTERS`], from the end, are hisses rather than tones.
const FRICATIVES: usize = 4;
const FIRST_FORMANTS: [f64; 4] = [300.0, 500.0, 700.0, 900.0];
const SECOND_FORMANTS: [f64; 5] = [1000.0, 1450.0, 1900.0, 2400.0, 3000.0];
/// Each fricative's band, Hz.
const HISS_BANDS: [(f64, f64); FRICATIVES] = [
    (3200.0, 4200.0),
    (4400.0, 5600.0),
    (5800.0, 7000.0),
    (2000.0, 2800.0),
];

/// The corpus's sizes and seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeechConfig {
    pub seed: u64,
    pub speakers: usize,
    pub train: usize,
    pub validation: usize,
    pub test: usize,
    /// Pseudo-words in the lexicon.
    pub lexicon: usize,
    /// Median words per utterance; the count is lognormal around it.
    pub median_words: f64,
    pub sample_rate: u32,
}

impl Default for SpeechConfig {
    fn default() -> Self {
        Self {
            seed: 7,
            speakers: 6,
            train: 240,
            validation: 24,
            test: 48,
            lexicon: 120,
            median_words: 5.0,
            sample_rate: 16_000,
        }
    }
}

/// Which split an utterance is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SpeechSplit {
    Train,
    Validation,
    Test,
}

/// One generated utterance: enough to make its audio again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeechKey {
    pub split: SpeechSplit,
    pub index: usize,
    pub speaker: usize,
    pub transcript: String,
}

/// A speaker: pitch (Hz), rate (letters last `1 / rate` of their base length) and timbre
/// (every formant scaled by it).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Speaker {
    pitch: f64,
    rate: f64,
    timbre: f64,
}

impl SpeechConfig {
    fn speaker(&self, speaker: usize) -> Speaker {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0x5eed_5bea_0000 ^ speaker as u64);
        Speaker {
            pitch: rng.random_range(95.0..230.0),
            rate: rng.random_range(0.8..1.25),
            timbre: rng.random_range(0.88..1.12),
        }
    }

    /// The lexicon: pseudo-words of 2 to 7 letters, the same for every split.
    pub fn lexicon(&self) -> Vec<String> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0x1e71_c0de);
        let letters: Vec<char> = LETTERS.chars().collect();
        (0..self.lexicon.max(1))
            .map(|_| {
                let len = rng.random_range(2..=7);
                (0..len)
                    .map(|_| letters[rng.random_range(0..letters.len())])
                    .collect()
            })
            .collect()
    }

    /// Every utterance of the corpus, by split, with its transcript and speaker.
    pub fn keys(&self) -> Vec<SpeechKey> {
        let lexicon = self.lexicon();
        let mut keys = Vec::new();
        for (split, count, salt) in splits(self.train, self.validation, self.test) {
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed.wrapping_mul(31) ^ salt);
            for index in 0..count {
                // Lognormal word count: most utterances a few words, a tail of long ones.
                let words = (self.median_words.ln() + 0.75 * gaussian(&mut rng))
                    .exp()
                    .round()
                    .clamp(1.0, 80.0) as usize;
                let transcript: Vec<&str> = (0..words)
                    .map(|_| lexicon[rng.random_range(0..lexicon.len())].as_str())
                    .collect();
                keys.push(SpeechKey {
                    split,
                    index,
                    speaker: rng.random_range(0..self.speakers.max(1)),
                    transcript: transcript.join(" "),
                });
            }
        }
        keys
    }

    /// The utterance's audio, the same for the same key and seed.
    pub fn audio(&self, key: &SpeechKey) -> Audio {
        self.audio_aligned(key).0
    }

    /// The utterance's audio and where each letter and pause of it lies.
    pub fn audio_aligned(&self, key: &SpeechKey) -> (Audio, Vec<Segment>) {
        let sr = f64::from(self.sample_rate);
        let speaker = self.speaker(key.speaker);
        let salt = (key.split as u64) << 32 | key.index as u64;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0xa0d1_0000_0000 ^ salt);
        let mut samples: Vec<f64> = Vec::new();
        let mut segments = Vec::new();
        let spoken = std::iter::once(' ')
            .chain(key.transcript.chars())
            .chain(std::iter::once(' '));
        for c in spoken {
            let start = samples.len();
            match LETTERS.find(c) {
                Some(at) => letter(&mut samples, &mut rng, sr, speaker, at),
                None => pause(&mut samples, &mut rng, sr, speaker),
            }
            segments.push(Segment {
                letter: c,
                samples: start..samples.len(),
            });
        }
        // From clean to noisy: a signal-to-noise ratio of about 30 dB down to about 5.
        let noise = 0.003 * 10f64.powf(rng.random_range(0.0..1.4));
        let samples = samples
            .into_iter()
            .map(|s| (s + noise * gaussian(&mut rng)).clamp(-1.0, 1.0) as f32)
            .collect();
        let audio = Audio {
            sample_rate: self.sample_rate,
            samples,
        };
        (audio, segments)
    }
}

/// The splits with their sizes, each with the salt of its own random stream (a split's
/// keys do not move when another split's size does).
pub(crate) fn splits(
    train: usize,
    validation: usize,
    test: usize,
) -> [(SpeechSplit, usize, u64); 3] {
    [
        (SpeechSplit::Train, train, 1),
        (SpeechSplit::Validation, validation, 2),
        (SpeechSplit::Test, test, 3),
    ]
}

/// Where one letter (or, as `' '`, a pause) of an utterance lies, in samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub letter: char,
    pub samples: std::ops::Range<usize>,
}

/// A pause of 60 to 150 ms, at the speaker's rate.
fn pause(out: &mut Vec<f64>, rng: &mut ChaCha8Rng, sr: f64, speaker: Speaker) {
    let seconds = rng.random_range(0.06..0.15) / speaker.rate;
    out.extend(std::iter::repeat_n(0.0, (seconds * sr) as usize));
}

/// Letter `at` of [`LETTERS`]: 70 to 130 ms at the speaker's rate, faded in and out over
/// 10 ms so that letters do not click into each other.
fn letter(out: &mut Vec<f64>, rng: &mut ChaCha8Rng, sr: f64, speaker: Speaker, at: usize) {
    let seconds = rng.random_range(0.07..0.13) / speaker.rate;
    let n = (seconds * sr) as usize;
    let level = rng.random_range(0.15..0.3);
    let vowels = LETTERS.len() - FRICATIVES;
    // (frequency, amplitude, phase) of each partial.
    let partials: Vec<(f64, f64, f64)> = if at < vowels {
        // Each instance of a letter a little off its speaker's formants, as no one says a
        // vowel twice alike.
        let jitter = |rng: &mut ChaCha8Rng| speaker.timbre * rng.random_range(0.95..1.05);
        let f1 = FIRST_FORMANTS[at % FIRST_FORMANTS.len()] * jitter(rng);
        let f2 = SECOND_FORMANTS[at / FIRST_FORMANTS.len()] * jitter(rng);
        // Each utterance's pitch wanders a little around the speaker's.
        let pitch = speaker.pitch * rng.random_range(0.95..1.05);
        (1..)
            .map(|k| k as f64 * pitch)
            .take_while(|&f| f < 4000.0)
            .map(|f| {
                let resonance = |centre: f64, width: f64| (-((f - centre) / width).powi(2)).exp();
                let amplitude = resonance(f1, 90.0) + 0.7 * resonance(f2, 140.0) + 0.02;
                (f, amplitude, rng.random_range(0.0..TAU))
            })
            .collect()
    } else {
        let (lo, hi) = HISS_BANDS[at - vowels];
        (0..40)
            .map(|_| {
                let f = rng.random_range(lo..hi) * speaker.timbre;
                (f, 0.25, rng.random_range(0.0..TAU))
            })
            .collect()
    };
    let norm: f64 = partials.iter().map(|p| p.1).sum::<f64>().max(1e-9);
    let ramp = (0.01 * sr) as usize;
    for i in 0..n {
        let t = i as f64 / sr;
        let value: f64 = partials
            .iter()
            .map(|&(f, a, phase)| a * (TAU * f * t + phase).sin())
            .sum();
        let fade = (i.min(n - 1 - i) as f64 / ramp.max(1) as f64).min(1.0);
        out.push(level * fade * value / norm * 3.0);
    }
}

/// A standard normal draw (Box-Muller).
fn gaussian(rng: &mut impl Rng) -> f64 {
    let u: f64 = rng.random_range(f64::EPSILON..1.0);
    let v: f64 = rng.random_range(0.0..1.0);
    (-2.0 * u.ln()).sqrt() * (TAU * v).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(config: &SpeechConfig, key: &SpeechKey) -> f64 {
        config.audio(key).samples.len() as f64 / f64::from(config.sample_rate)
    }

    #[test]
    fn the_same_seed_makes_the_same_corpus_and_another_seed_another() {
        let config = SpeechConfig {
            train: 3,
            validation: 1,
            test: 1,
            ..SpeechConfig::default()
        };
        let keys = config.keys();
        assert_eq!(keys.len(), 5);
        assert_eq!(keys, config.keys());
        assert_eq!(config.audio(&keys[0]), config.audio(&keys[0]));
        let other = SpeechConfig {
            seed: 8,
            ..config.clone()
        };
        assert_ne!(other.keys()[0].transcript, keys[0].transcript);
    }

    /// Lengths as a speech corpus has them: most of a few seconds, some under one, a tail
    /// past 15 s, and no sample out of [-1, 1].
    #[test]
    fn utterances_run_from_under_a_second_to_a_long_tail() {
        let config = SpeechConfig::default();
        let keys = config.keys();
        let mut lengths: Vec<f64> = keys.iter().map(|k| seconds(&config, k)).collect();
        lengths.sort_by(f64::total_cmp);
        let median = lengths[lengths.len() / 2];
        let longest = lengths[lengths.len() - 1];
        assert!(lengths[0] < 1.0, "shortest {:.2} s", lengths[0]);
        assert!((2.0..6.0).contains(&median), "median {median:.2} s");
        assert!(longest > 15.0, "longest {longest:.2} s");
        let audio = config.audio(&keys[0]);
        assert!(
            audio
                .samples
                .iter()
                .all(|s| s.is_finite() && s.abs() <= 1.0)
        );
    }

    /// The letters are learnable across speakers, but not all of them perfectly: each
    /// letter's mean log-mel spectrum, learned from half the speakers, names most of the
    /// letters the other half speak (nearest centroid; chance is 1 in 24).
    #[test]
    fn letters_are_told_apart_across_speakers() {
        use crate::logmel::{LogMel, LogMelConfig};
        let config = SpeechConfig {
            train: 60,
            validation: 0,
            test: 0,
            ..SpeechConfig::default()
        };
        let logmel = LogMel::new(LogMelConfig {
            sample_rate: config.sample_rate,
            n_fft: 512,
            hop: 160,
            n_mels: 40,
        });
        // (speaker, letter, mean log-mel of the letter's middle frames)
        let mut examples: Vec<(usize, char, Vec<f64>)> = Vec::new();
        for key in config.keys() {
            let (audio, segments) = config.audio_aligned(&key);
            let spectrogram = logmel.compute(&audio.samples);
            for segment in segments.iter().filter(|s| s.letter != ' ') {
                let (first, last) = (segment.samples.start / 160 + 2, segment.samples.end / 160);
                if last <= first + 1 || last > spectrogram.frames {
                    continue;
                }
                let mean: Vec<f64> = (0..40)
                    .map(|m| {
                        let row = &spectrogram.data[m * spectrogram.frames..][..spectrogram.frames];
                        row[first..last - 1]
                            .iter()
                            .map(|&v| f64::from(v))
                            .sum::<f64>()
                            / (last - 1 - first) as f64
                    })
                    .collect();
                examples.push((key.speaker, segment.letter, mean));
            }
        }
        let learned = |s: usize| s < config.speakers / 2;
        let mut centroids: std::collections::BTreeMap<char, (Vec<f64>, usize)> = Default::default();
        for (_, letter, mean) in examples.iter().filter(|e| learned(e.0)) {
            let entry = centroids.entry(*letter).or_insert((vec![0.0; 40], 0));
            entry.0.iter_mut().zip(mean).for_each(|(c, v)| *c += v);
            entry.1 += 1;
        }
        let distance = |a: &[f64], b: &[f64], n: usize| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x / n as f64 - y).powi(2))
                .sum::<f64>()
        };
        let held_out: Vec<_> = examples.iter().filter(|e| !learned(e.0)).collect();
        let right = held_out
            .iter()
            .filter(|(_, letter, mean)| {
                let nearest = centroids
                    .iter()
                    .min_by(|a, b| {
                        distance(&a.1.0, mean, a.1.1).total_cmp(&distance(&b.1.0, mean, b.1.1))
                    })
                    .map(|(c, _)| *c);
                nearest == Some(*letter)
            })
            .count();
        let accuracy = right as f64 / held_out.len() as f64;
        assert!(held_out.len() > 200, "{} letters held out", held_out.len());
        // Learnable, and not trivially: speakers' formants overlap at the grid's edges.
        assert!(
            (0.65..0.97).contains(&accuracy),
            "nearest-centroid accuracy {accuracy:.3}"
        );
    }

    /// Every transcript is spelled with the corpus's letters and spaces, and the speakers
    /// differ.
    #[test]
    fn transcripts_use_the_alphabet_and_speakers_differ() {
        let config = SpeechConfig::default();
        for key in config.keys() {
            assert!(
                key.transcript
                    .chars()
                    .all(|c| c == ' ' || LETTERS.contains(c)),
                "{:?}",
                key.transcript
            );
        }
        let pitches: Vec<f64> = (0..config.speakers)
            .map(|s| config.speaker(s).pitch)
            .collect();
        assert!(
            pitches.windows(2).any(|w| (w[0] - w[1]).abs() > 10.0),
            "{pitches:?}"
        );
    }
}
