//! The log-mel frontend of the DCASE 2020 Task 2 baseline: STFT (Hann window,
//! centred frames, zero padding), power 2, Slaney mel filters as librosa builds
//! them, then `10 * log10(mel + eps)`.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

use crate::spectrogram::Spectrogram;

/// `sys.float_info.epsilon`, the floor the baseline adds before the log.
const LOG_EPS: f64 = f64::EPSILON;

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LogMelConfig {
    pub sample_rate: u32,
    pub n_fft: usize,
    pub hop: usize,
    pub n_mels: usize,
}

impl Default for LogMelConfig {
    fn default() -> Self {
        Self {
            sample_rate: 16_000,
            n_fft: 1024,
            hop: 512,
            n_mels: 64,
        }
    }
}

/// A reusable frontend: window, FFT plan and mel filters are built once.
pub struct LogMel {
    config: LogMelConfig,
    window: Vec<f64>,
    fft: Arc<dyn RealToComplex<f64>>,
    /// `n_mels` rows of `n_fft / 2 + 1` weights.
    filters: Vec<Vec<f64>>,
}

impl LogMel {
    pub fn new(config: LogMelConfig) -> Self {
        let n = config.n_fft;
        // Periodic Hann, as scipy's get_window('hann', n, fftbins=True) gives librosa.
        let window = (0..n)
            .map(|i| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos())
            .collect();
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(n);
        let filters = slaney_mel_filters(config.sample_rate, n, config.n_mels);
        Self {
            config,
            window,
            fft,
            filters,
        }
    }

    pub fn config(&self) -> LogMelConfig {
        self.config
    }

    /// Number of frames librosa produces for `samples` samples (centred frames).
    pub fn frames_for(&self, samples: usize) -> usize {
        1 + samples / self.config.hop
    }

    pub fn compute(&self, signal: &[f32]) -> Spectrogram {
        let LogMelConfig {
            n_fft, hop, n_mels, ..
        } = self.config;
        let pad = n_fft / 2;
        let frames = self.frames_for(signal.len());
        let bins = n_fft / 2 + 1;
        let mut out = Spectrogram::zeros(n_mels, frames);
        let mut input = self.fft.make_input_vec();
        let mut spectrum = self.fft.make_output_vec();
        let mut power = vec![0.0f64; bins];
        for frame in 0..frames {
            let start = frame * hop;
            for (i, slot) in input.iter_mut().enumerate() {
                // Zero padding of `pad` samples on both sides (librosa's pad_mode="constant").
                let t = (start + i).checked_sub(pad);
                let x = t.and_then(|t| signal.get(t)).copied().unwrap_or(0.0);
                *slot = x as f64 * self.window[i];
            }
            self.fft
                .process(&mut input, &mut spectrum)
                .expect("buffers come from the plan, so their lengths match");
            for (p, c) in power.iter_mut().zip(&spectrum) {
                *p = c.norm_sqr();
            }
            for (mel, filter) in self.filters.iter().enumerate() {
                let energy: f64 = filter.iter().zip(&power).map(|(w, p)| w * p).sum();
                out.data[mel * frames + frame] = (10.0 * (energy + LOG_EPS).log10()) as f32;
            }
        }
        out
    }
}

fn hz_to_mel_slaney(hz: f64) -> f64 {
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = (6.4f64).ln() / 27.0;
    if hz >= min_log_hz {
        min_log_mel + (hz / min_log_hz).ln() / logstep
    } else {
        hz / f_sp
    }
}

fn mel_to_hz_slaney(mel: f64) -> f64 {
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = (6.4f64).ln() / 27.0;
    if mel >= min_log_mel {
        min_log_hz * (logstep * (mel - min_log_mel)).exp()
    } else {
        f_sp * mel
    }
}

/// `librosa.filters.mel(sr, n_fft, n_mels, fmin=0, fmax=sr/2, htk=False, norm='slaney')`.
fn slaney_mel_filters(sample_rate: u32, n_fft: usize, n_mels: usize) -> Vec<Vec<f64>> {
    let bins = n_fft / 2 + 1;
    let fmax = sample_rate as f64 / 2.0;
    let fft_freqs: Vec<f64> = (0..bins)
        .map(|i| i as f64 * sample_rate as f64 / n_fft as f64)
        .collect();
    let (mel_min, mel_max) = (hz_to_mel_slaney(0.0), hz_to_mel_slaney(fmax));
    let mel_f: Vec<f64> = (0..n_mels + 2)
        .map(|i| mel_to_hz_slaney(mel_min + (mel_max - mel_min) * i as f64 / (n_mels + 1) as f64))
        .collect();
    (0..n_mels)
        .map(|m| {
            let (lo, centre, hi) = (mel_f[m], mel_f[m + 1], mel_f[m + 2]);
            let enorm = 2.0 / (hi - lo);
            fft_freqs
                .iter()
                .map(|&f| {
                    let lower = (f - lo) / (centre - lo);
                    let upper = (hi - f) / (hi - centre);
                    lower.min(upper).max(0.0) * enorm
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_second_clip_has_313_frames() {
        let frontend = LogMel::new(LogMelConfig::default());
        assert_eq!(frontend.frames_for(160_000), 313);
        let spec = frontend.compute(&vec![0.0; 160_000]);
        assert_eq!((spec.n_mels, spec.frames), (64, 313));
        // Silence sits at the epsilon floor.
        assert!((spec.at(10, 100) - (10.0 * f64::EPSILON.log10()) as f32).abs() < 1e-3);
    }

    #[test]
    fn a_pure_tone_peaks_in_the_mel_band_that_holds_it() {
        let sr = 16_000.0;
        let tone_hz = 1_000.0;
        let signal: Vec<f32> = (0..16_000)
            .map(|i| (2.0 * std::f64::consts::PI * tone_hz * i as f64 / sr).sin() as f32)
            .collect();
        let frontend = LogMel::new(LogMelConfig::default());
        let spec = frontend.compute(&signal);
        let frame = spec.frames / 2;
        let loudest = (0..spec.n_mels)
            .max_by(|&a, &b| spec.at(a, frame).total_cmp(&spec.at(b, frame)))
            .unwrap();
        let filters = slaney_mel_filters(16_000, 1024, 64);
        let tone_bin = (tone_hz / (sr / 1024.0)).round() as usize;
        let strongest_filter = (0..64)
            .max_by(|&a, &b| filters[a][tone_bin].total_cmp(&filters[b][tone_bin]))
            .unwrap();
        assert_eq!(loudest, strongest_filter);
    }

    #[test]
    fn slaney_mel_scale_round_trips() {
        for hz in [0.0, 300.0, 999.0, 1000.0, 4000.0, 8000.0] {
            assert!((mel_to_hz_slaney(hz_to_mel_slaney(hz)) - hz).abs() < 1e-9);
        }
    }
}

#[cfg(test)]
mod librosa_fixture {
    use super::*;

    /// `tests/fixtures/logmel_librosa.json`, made by `make_logmel_fixture.py` beside it.
    #[test]
    fn matches_librosa_within_a_thousandth_of_a_db() {
        let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/");
        let audio = crate::audio::read_wav(std::path::Path::new(&format!(
            "{fixtures}logmel_signal.wav"
        )))
        .unwrap();
        let text = std::fs::read_to_string(format!("{fixtures}logmel_librosa.json")).unwrap();
        let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
        let cases = fixture["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 2);
        for case in cases {
            let n_mels = case["n_mels"].as_u64().unwrap() as usize;
            let expected: Vec<f64> = case["log_mel"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let frontend = LogMel::new(LogMelConfig {
                sample_rate: audio.sample_rate,
                n_mels,
                ..LogMelConfig::default()
            });
            let ours = frontend.compute(&audio.samples);
            assert_eq!(ours.n_mels * ours.frames, expected.len());
            assert_eq!(ours.frames as u64, case["frames"].as_u64().unwrap());
            // "Not negligible": within 80 dB of the loudest bin; the floor below that is
            // float32 rounding in librosa's STFT, not the frontend.
            let loudest = expected.iter().cloned().fold(f64::MIN, f64::max);
            let (mut worst, mut compared) = (0.0f64, 0);
            for (ours, theirs) in ours.data.iter().zip(&expected) {
                if *theirs > loudest - 80.0 {
                    worst = worst.max((*ours as f64 - theirs).abs());
                    compared += 1;
                }
            }
            assert!(
                compared > expected.len() * 9 / 10,
                "{compared} of {}",
                expected.len()
            );
            eprintln!(
                "n_mels {n_mels}: {compared} values compared, worst difference {worst:.2e} dB"
            );
            assert!(
                worst <= 1e-3,
                "n_mels {n_mels}: worst difference {worst} dB"
            );
        }
    }
}
