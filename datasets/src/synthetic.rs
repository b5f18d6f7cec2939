//! The built-in dataset: machine-like sounds, deterministic from a seed.
//!
//! Each machine ID hums at its own fundamental with a few harmonics whose pitch drifts
//! slowly, plus broadband noise. The train split holds normal clips only; the test split
//! adds labelled anomalies of three kinds: clicks, a harmonic shifted off the series, and
//! a weakened harmonic. Clips are synthesised as audio and go through the same log-mel
//! frontend as real recordings, so `trainer-cli synth` can later write them as WAV files.
//!
//! Like real machine sounds, it is not easy everywhere: each ID's anomalies run from barely
//! audible to obvious ([`severity`]), and IDs differ in difficulty ([`difficulty`]): the
//! higher IDs vary more from clip to clip when normal (level, noise, soft knocks) and their
//! anomalies are fainter. A model that learns the sounds scores well above chance but not
//! perfectly, and differently per ID, so a worse model shows as a lower score.

use std::f64::consts::TAU;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::clip::{ClipInfo, Origin};
pub use crate::clip_key::{AnomalyKind, ClipKey};
use crate::label::Split;
use crate::logmel::LogMelConfig;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyntheticConfig {
    pub seed: u64,
    pub machine_ids: u32,
    pub train_per_id: usize,
    pub test_normal_per_id: usize,
    pub test_anomaly_per_id: usize,
    pub seconds: f32,
    pub sample_rate: u32,
    pub n_mels: usize,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        Self {
            seed: 2020,
            machine_ids: 4,
            train_per_id: 40,
            test_normal_per_id: 12,
            test_anomaly_per_id: 12,
            seconds: 10.0,
            sample_rate: 16_000,
            n_mels: 64,
        }
    }
}

/// The sound of one machine ID: what every normal clip of that ID shares.
#[derive(Debug, Clone)]
struct Machine {
    f0: f64,
    amplitudes: Vec<f64>,
    noise: f64,
    drift_depth: f64,
}

impl Machine {
    fn new(seed: u64, id: u32) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, &[0x6d61_6368, id as u64]));
        // Fundamentals far enough apart that IDs sound different.
        let f0 = 180.0 + 85.0 * id as f64 + rng.random_range(-10.0..10.0);
        let n_harmonics = 5;
        let amplitudes = (0..n_harmonics)
            .map(|h| rng.random_range(0.08..0.2) / (1.0 + 0.3 * h as f64))
            .collect();
        Self {
            f0,
            amplitudes,
            noise: rng.random_range(0.004..0.008),
            drift_depth: rng.random_range(0.004..0.012),
        }
    }
}

/// The built-in dataset: its clips are named by [`ClipKey`]s and synthesised when read
/// (through [`crate::ClipReader`]), never held as a whole.
#[derive(Debug, Clone, Copy)]
pub struct SyntheticDataset;

impl SyntheticDataset {
    /// Every clip key of the dataset, train split first.
    pub fn keys(config: &SyntheticConfig) -> Vec<ClipKey> {
        let mut keys = Vec::new();
        for machine_id in 0..config.machine_ids {
            for index in 0..config.train_per_id {
                keys.push(ClipKey {
                    split: Split::Train,
                    machine_id,
                    index,
                    anomaly: None,
                });
            }
        }
        for machine_id in 0..config.machine_ids {
            for index in 0..config.test_normal_per_id {
                keys.push(ClipKey {
                    split: Split::Test,
                    machine_id,
                    index,
                    anomaly: None,
                });
            }
            for index in 0..config.test_anomaly_per_id {
                let anomaly = Some(AnomalyKind::ALL[index % AnomalyKind::ALL.len()]);
                keys.push(ClipKey {
                    split: Split::Test,
                    machine_id,
                    index,
                    anomaly,
                });
            }
        }
        keys
    }

    /// The machine type synthetic clips are filed under.
    pub const MACHINE_TYPE: &'static str = "synthetic";

    /// Every clip as an index entry, synthesised only when read (see [`crate::ClipReader`]).
    pub fn index(config: &SyntheticConfig) -> Vec<ClipInfo> {
        Self::keys(config)
            .into_iter()
            .map(|key| ClipInfo {
                name: format!("{}.wav", key.name()),
                machine_type: Self::MACHINE_TYPE.into(),
                machine_id: key.machine_id,
                split: key.split,
                label: Some(key.label()),
                origin: Origin::Synthetic(key),
            })
            .collect()
    }

    /// The log-mel settings its clips are read with.
    pub fn features(config: &SyntheticConfig) -> crate::FeatureSettings {
        crate::FeatureSettings {
            logmel: LogMelConfig {
                sample_rate: config.sample_rate,
                n_mels: config.n_mels,
                ..LogMelConfig::default()
            },
            resample: false,
        }
    }
}

/// How hard an ID is, from 0 (ID 00) to 1 (the last ID): how much its normal clips vary and
/// how much fainter its anomalies are.
pub fn difficulty(config: &SyntheticConfig, machine_id: u32) -> f64 {
    machine_id as f64 / config.machine_ids.saturating_sub(1).max(1) as f64
}

/// How strong an anomalous clip's anomaly is, in (0, 1]: each kind's clips of an ID are
/// graded evenly from subtle to obvious, in index order.
pub fn severity(config: &SyntheticConfig, key: &ClipKey) -> f64 {
    let kinds = AnomalyKind::ALL.len();
    let per_kind = config.test_anomaly_per_id.div_ceil(kinds).max(1);
    ((key.index / kinds) as f64 + 1.0) / per_kind as f64
}

/// Soft knocks: short decaying noise bursts at random places, `level` times a unit burst.
fn add_bursts(audio: &mut [f64], rng: &mut impl Rng, sr: f64, count: usize, level: (f64, f64)) {
    let length = (0.004 * sr) as usize;
    if audio.len() <= length {
        return;
    }
    for _ in 0..count {
        let start = rng.random_range(0..audio.len() - length);
        let level = rng.random_range(level.0..level.1);
        for j in 0..length {
            let decay = (-(j as f64) / (0.0008 * sr)).exp();
            audio[start + j] += level * decay * gaussian(rng);
        }
    }
}

/// The audio of one clip, in [-1, 1].
pub fn waveform(config: &SyntheticConfig, key: &ClipKey) -> Vec<f32> {
    let machine = Machine::new(config.seed, key.machine_id);
    let split_tag = match key.split {
        Split::Train => 1,
        Split::Test => 2,
    };
    let anomaly_tag = key.anomaly.map_or(0, |k| 1 + k as u64);
    let mut rng = ChaCha8Rng::seed_from_u64(mix(
        config.seed,
        &[
            split_tag,
            key.machine_id as u64,
            key.index as u64,
            anomaly_tag,
        ],
    ));
    let sr = config.sample_rate as f64;
    let n = (config.seconds as f64 * sr) as usize;

    let hard = difficulty(config, key.machine_id);
    // How far a normal clip strays from its ID's sound grows with the ID's difficulty.
    let spread = 0.1 + 0.3 * hard;
    let mut amplitudes: Vec<f64> = machine
        .amplitudes
        .iter()
        .map(|a| a * rng.random_range(1.0 - spread..1.0 + spread))
        .collect();
    let noise = machine.noise * rng.random_range(1.0 - 0.5 * hard..=1.0 + 1.5 * hard);
    // The anomaly's strength: graded within the ID, fainter on harder IDs.
    let strength = key
        .anomaly
        .map_or(0.0, |_| severity(config, key) * (1.0 - 0.6 * hard));
    // Harmonic numbers: 1, 2, 3, ... unless an anomaly moves one.
    let mut multiples: Vec<f64> = (1..=amplitudes.len()).map(|h| h as f64).collect();
    match key.anomaly {
        Some(AnomalyKind::ShiftedHarmonic) => {
            let h = rng.random_range(1..multiples.len());
            multiples[h] += 0.03 + 0.47 * strength;
            amplitudes[h] *= 1.0 + 0.5 * strength;
        }
        Some(AnomalyKind::MissingHarmonic) => {
            let h = rng.random_range(0..2);
            amplitudes[h] *= 1.0 - (0.2 + 0.8 * strength);
        }
        _ => {}
    }

    let drift_period = rng.random_range(3.0..8.0);
    let drift_phase = rng.random_range(0.0..TAU);
    let am_rate = rng.random_range(0.5..2.0);
    let mut phases: Vec<f64> = (0..amplitudes.len())
        .map(|_| rng.random_range(0.0..TAU))
        .collect();
    let mut audio = Vec::with_capacity(n);
    for i in 0..n {
        let t = i as f64 / sr;
        let f0 =
            machine.f0 * (1.0 + machine.drift_depth * (TAU * t / drift_period + drift_phase).sin());
        let am = 1.0 + 0.1 * (TAU * am_rate * t).sin();
        let mut x = 0.0;
        for ((phase, a), m) in phases.iter_mut().zip(&amplitudes).zip(&multiples) {
            *phase = (*phase + TAU * f0 * m / sr) % TAU;
            x += a * am * phase.sin();
        }
        x += noise * gaussian(&mut rng);
        audio.push(x);
    }

    // Harder IDs knock softly now and then when normal, which hides faint clicks; and any
    // machine, now and then, knocks hard while working normally: a rare normal sound that a
    // model may take for an anomaly, as the loudest normals of real recordings are (it is
    // what holds the pAUC, the score at few false alarms, below the AUC).
    if rng.random_bool(hard * 0.6) {
        let knocks = rng.random_range(1..6);
        add_bursts(&mut audio, &mut rng, sr, knocks, (0.01, 0.05));
    }
    if rng.random_bool(0.08 + 0.12 * hard) {
        let knocks = rng.random_range(2..8);
        add_bursts(&mut audio, &mut rng, sr, knocks, (0.1, 0.3));
    }
    if key.anomaly == Some(AnomalyKind::Clicks) {
        let clicks = 1 + (strength * 16.0).round() as usize;
        let level = 0.03 + 0.45 * strength;
        add_bursts(&mut audio, &mut rng, sr, clicks, (0.7 * level, 1.3 * level));
    }
    audio
        .into_iter()
        .map(|x| x.clamp(-1.0, 1.0) as f32)
        .collect()
}

/// Standard normal by Box-Muller; the dataset must not depend on a distribution crate's
/// algorithm choice, which may change between versions and alter every clip.
fn gaussian(rng: &mut impl Rng) -> f64 {
    let u1: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (TAU * u2).cos()
}

/// SplitMix64 over the parts: a stable seed for each clip.
fn mix(seed: u64, parts: &[u64]) -> u64 {
    let mut h = seed ^ 0x9e37_79b9_7f4a_7c15;
    for p in parts {
        h ^= p.wrapping_add(0x9e37_79b9_7f4a_7c15);
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::label::Label;
    use crate::logmel::LogMel;
    use crate::spectrogram::Spectrogram;

    fn small() -> SyntheticConfig {
        SyntheticConfig {
            machine_ids: 2,
            train_per_id: 2,
            test_normal_per_id: 1,
            test_anomaly_per_id: 3,
            seconds: 2.0,
            ..SyntheticConfig::default()
        }
    }

    /// Each mel band's mean over the clip, in dB.
    fn mean_spectrum(frontend: &LogMel, config: &SyntheticConfig, key: ClipKey) -> Vec<f32> {
        let s = frontend.compute(&waveform(config, &key));
        (0..s.n_mels)
            .map(|m| (0..s.frames).map(|f| s.at(m, f)).sum::<f32>() / s.frames as f32)
            .collect()
    }

    fn spectrogram(config: &SyntheticConfig, key: &ClipKey) -> Spectrogram {
        LogMel::new(SyntheticDataset::features(config).logmel).compute(&waveform(config, key))
    }

    #[test]
    fn synthesis_is_deterministic_from_the_seed() {
        let keys = SyntheticDataset::keys(&small());
        let (train, anomaly) = (&keys[0], &keys[keys.len() - 1]);
        assert_eq!(spectrogram(&small(), train), spectrogram(&small(), train));
        assert_eq!(
            spectrogram(&small(), anomaly),
            spectrogram(&small(), anomaly)
        );
        let other = SyntheticConfig { seed: 1, ..small() };
        assert_ne!(spectrogram(&small(), train), spectrogram(&other, train));
    }

    #[test]
    fn splits_hold_what_they_should() {
        let index = SyntheticDataset::index(&small());
        let (train, test): (Vec<_>, Vec<_>) = index.iter().partition(|c| c.split == Split::Train);
        assert_eq!(train.len(), 4);
        assert!(train.iter().all(|c| c.label == Some(Label::Normal)));
        assert_eq!(test.len(), 2 * (1 + 3));
        assert_eq!(
            test.iter()
                .filter(|c| c.label == Some(Label::Anomaly))
                .count(),
            6
        );
        assert_eq!(test[1].name, "anomaly_id_00_00000000.wav");
        let frames = LogMel::new(LogMelConfig::default()).frames_for(32_000);
        for clip in &train {
            let Origin::Synthetic(key) = &clip.origin else {
                panic!("{} is not synthetic", clip.name);
            };
            assert_eq!(spectrogram(&small(), key).frames, frames);
        }
    }

    #[test]
    fn default_clips_are_ten_seconds_of_64_mels() {
        let config = SyntheticConfig::default();
        let key = ClipKey {
            split: Split::Train,
            machine_id: 0,
            index: 0,
            anomaly: None,
        };
        let audio = waveform(&config, &key);
        assert_eq!(audio.len(), 160_000);
        let spec = LogMel::new(LogMelConfig::default()).compute(&audio);
        assert_eq!((spec.n_mels, spec.frames), (64, 313));
    }

    /// Each anomaly must change the spectrogram where a listener would hear it.
    #[test]
    fn anomalies_differ_from_normal_sound() {
        let config = SyntheticConfig {
            seconds: 2.0,
            ..SyntheticConfig::default()
        };
        let frontend = LogMel::new(LogMelConfig::default());
        let mean_spectrum = |key: ClipKey| mean_spectrum(&frontend, &config, key);
        let frame_energy_spread = |key: ClipKey| {
            let s = frontend.compute(&waveform(&config, &key));
            let per_frame: Vec<f32> = (0..s.frames)
                .map(|f| (40..s.n_mels).map(|m| s.at(m, f)).sum::<f32>())
                .collect();
            let max = per_frame.iter().cloned().fold(f32::MIN, f32::max);
            let median = {
                let mut v = per_frame.clone();
                v.sort_by(f32::total_cmp);
                v[v.len() / 2]
            };
            max - median
        };
        let normal = ClipKey {
            split: Split::Test,
            machine_id: 0,
            index: 0,
            anomaly: None,
        };
        // The last clips of each kind are the most severe.
        let last = config.test_anomaly_per_id - AnomalyKind::ALL.len();
        let with = |kind| ClipKey {
            anomaly: Some(kind),
            index: last + AnomalyKind::ALL.iter().position(|&k| k == kind).unwrap(),
            ..normal
        };
        // Clicks: broadband bursts lift the high bands of some frames far above the rest.
        assert!(
            frame_energy_spread(with(AnomalyKind::Clicks))
                > 3.0 * frame_energy_spread(normal).max(1.0)
        );
        // Harmonic anomalies move energy between mel bands.
        let base = mean_spectrum(normal);
        for kind in [AnomalyKind::ShiftedHarmonic, AnomalyKind::MissingHarmonic] {
            let other = mean_spectrum(with(kind));
            let largest_change = base
                .iter()
                .zip(&other)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(
                largest_change > 6.0,
                "{kind:?} changes the mean spectrum by only {largest_change} dB"
            );
        }
    }
    /// Anomalies are graded: within an ID the first of a kind changes the sound less than the
    /// last, and the same anomaly is fainter on the hardest ID than on the easiest.
    #[test]
    fn anomalies_run_from_subtle_to_obvious() {
        let config = SyntheticConfig {
            seconds: 2.0,
            ..SyntheticConfig::default()
        };
        let frontend = LogMel::new(LogMelConfig::default());
        let mean_spectrum = |key: ClipKey| mean_spectrum(&frontend, &config, key);
        let change = |machine_id, index| {
            let normal = ClipKey {
                split: Split::Test,
                machine_id,
                index: 0,
                anomaly: None,
            };
            let anomalous = ClipKey {
                index,
                anomaly: Some(AnomalyKind::ALL[index % AnomalyKind::ALL.len()]),
                ..normal
            };
            let (a, b) = (mean_spectrum(normal), mean_spectrum(anomalous));
            a.iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max)
        };
        let kinds = AnomalyKind::ALL.len();
        let (subtle, obvious) = (kinds - 1, config.test_anomaly_per_id - 1);
        assert!(
            severity(
                &config,
                &ClipKey {
                    index: subtle,
                    split: Split::Test,
                    machine_id: 0,
                    anomaly: None
                }
            ) < 0.3
        );
        let (weak, strong) = (change(0, subtle), change(0, obvious));
        assert!(weak < 0.5 * strong, "subtle {weak} dB, obvious {strong} dB");
        let hardest = config.machine_ids - 1;
        assert!(
            change(hardest, obvious) < strong,
            "the hardest ID's anomalies are fainter"
        );
        assert_eq!(difficulty(&config, 0), 0.0);
        assert_eq!(difficulty(&config, hardest), 1.0);
    }
}
