//! From a clip's index entry to its log-mel spectrogram: decode, resample when allowed,
//! run the frontend, with an optional feature cache on disk.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::audio::{Audio, decode_wav, read_wav, resample};
use crate::clip::{ClipInfo, Origin};
use crate::error::{FileError, FileProblem};
use crate::logmel::{LogMel, LogMelConfig};
use crate::npy::{decode_npy, read_npy, write_npy};
use crate::spectrogram::Spectrogram;
use crate::synthetic::{SyntheticConfig, waveform};

/// How recordings become features; part of a run's identity (saved in checkpoints).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct FeatureSettings {
    pub logmel: LogMelConfig,
    /// Convert recordings at another sample rate instead of rejecting them.
    #[serde(default)]
    pub resample: bool,
}

/// Reads clips' spectrograms. Shared by the loader's worker threads.
pub struct ClipReader {
    settings: FeatureSettings,
    frontend: LogMel,
    synthetic: Option<SyntheticConfig>,
    cache: Option<FeatureCache>,
}

impl ClipReader {
    pub fn new(settings: FeatureSettings) -> Self {
        Self {
            settings,
            frontend: LogMel::new(settings.logmel),
            synthetic: None,
            cache: None,
        }
    }

    /// Synthetic clips are synthesised from this configuration.
    pub fn with_synthetic(mut self, config: SyntheticConfig) -> Self {
        self.synthetic = Some(config);
        self
    }

    pub fn with_cache(mut self, cache: Option<FeatureCache>) -> Self {
        self.cache = cache;
        self
    }

    pub fn settings(&self) -> FeatureSettings {
        self.settings
    }

    pub fn read(&self, clip: &ClipInfo) -> Result<Spectrogram, FileError> {
        let n_mels = self.settings.logmel.n_mels;
        match &clip.origin {
            Origin::Npy(path) => read_npy(path, n_mels),
            Origin::Wav(path) => {
                if let Some(cached) = self.cache.as_ref().and_then(|c| c.get(path, self)) {
                    return Ok(cached);
                }
                let spectrogram = self.wav_features(path)?;
                if let Some(cache) = &self.cache {
                    cache.put(path, self, &spectrogram);
                }
                Ok(spectrogram)
            }
            Origin::NpyBytes(file) => {
                decode_npy(&file.bytes, n_mels).map_err(|p| FileError::new(&file.path, p))
            }
            Origin::WavBytes(file) => {
                let audio = decode_wav(&file.bytes).map_err(|p| FileError::new(&file.path, p))?;
                self.features(audio, &file.path)
            }
            Origin::Synthetic(key) => {
                let config = self.synthetic.as_ref().ok_or_else(|| {
                    FileError::new(clip.describe(), FileProblem::NoSyntheticConfig)
                })?;
                Ok(self.frontend.compute(&waveform(config, key)))
            }
        }
    }

    /// The log-mel of one recording, as `trainer-cli features` writes it.
    pub fn wav_features(&self, path: &Path) -> Result<Spectrogram, FileError> {
        self.features(read_wav(path)?, path)
    }

    /// The log-mel of decoded audio from `path`, resampled when allowed.
    fn features(&self, mut audio: Audio, path: &Path) -> Result<Spectrogram, FileError> {
        let expected = self.settings.logmel.sample_rate;
        if audio.sample_rate != expected {
            if !self.settings.resample {
                return Err(FileError::new(
                    path,
                    FileProblem::SampleRate {
                        found: audio.sample_rate,
                        expected,
                    },
                ));
            }
            audio = resample(&audio, expected).map_err(|p| FileError::new(path, p))?;
        }
        Ok(self.frontend.compute(&audio.samples))
    }
}

/// Features on disk, one `.npy` per recording and feature settings, so a dataset is decoded
/// once however many runs and epochs read it.
#[derive(Debug, Clone)]
pub struct FeatureCache {
    dir: PathBuf,
}

/// Bumped when the frontend's output changes, so old cache files are not read.
const CACHE_FORMAT: u32 = 1;

impl FeatureCache {
    pub fn new(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        Ok(Self { dir })
    }

    /// The cache file of `path` under `reader`'s settings: keyed by the recording's path,
    /// size and modification time and by every feature setting.
    pub fn entry(&self, path: &Path, reader: &ClipReader) -> PathBuf {
        let meta = std::fs::metadata(path).ok();
        let modified = meta
            .as_ref()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let absolute = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let s = reader.settings;
        let key = format!(
            "{CACHE_FORMAT}|{}|{}|{modified}|{}|{}|{}|{}|{}",
            absolute.display(),
            meta.map_or(0, |m| m.len()),
            s.logmel.sample_rate,
            s.logmel.n_fft,
            s.logmel.hop,
            s.logmel.n_mels,
            s.resample,
        );
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        self.dir.join(format!(
            "{}-{:016x}.npy",
            stem.unwrap_or_default(),
            fnv1a(key.as_bytes())
        ))
    }

    fn get(&self, path: &Path, reader: &ClipReader) -> Option<Spectrogram> {
        let entry = self.entry(path, reader);
        if !entry.exists() {
            return None;
        }
        match read_npy(&entry, reader.settings.logmel.n_mels) {
            Ok(s) => Some(s),
            Err(error) => {
                tracing::warn!(%error, "unreadable feature-cache file; recomputing it");
                None
            }
        }
    }

    fn put(&self, path: &Path, reader: &ClipReader, spectrogram: &Spectrogram) {
        let entry = self.entry(path, reader);
        if let Err(error) = write_npy(&entry, spectrogram) {
            // The cache only saves time: a full disk must not stop training.
            tracing::warn!(path = %entry.display(), %error, "could not write a feature-cache file");
        }
    }
}

/// FNV-1a, 64-bit: a hash that stays the same across Rust versions and platforms (std's
/// `DefaultHasher` does not promise that), for cache file names only.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audio::{Audio, write_wav};
    use crate::label::{Label, Split};

    fn wav_clip(path: &Path) -> ClipInfo {
        ClipInfo {
            name: "normal_id_00_00000000.wav".into(),
            machine_type: "fan".into(),
            machine_id: 0,
            split: Split::Train,
            label: Some(Label::Normal),
            origin: Origin::Wav(path.to_path_buf()),
        }
    }

    fn tone(sample_rate: u32, seconds: f32) -> Audio {
        let n = (sample_rate as f32 * seconds) as usize;
        Audio {
            sample_rate,
            samples: (0..n).map(|i| (i as f32 * 0.07).sin() * 0.3).collect(),
        }
    }

    #[test]
    fn the_cache_returns_what_the_frontend_computed_and_follows_the_settings() {
        let dir = tempfile::tempdir().unwrap();
        let wav = dir.path().join("a.wav");
        write_wav(&wav, &tone(16_000, 1.0)).unwrap();
        let cache = FeatureCache::new(dir.path().join("cache")).unwrap();
        let reader = ClipReader::new(FeatureSettings::default()).with_cache(Some(cache.clone()));
        let first = reader.read(&wav_clip(&wav)).unwrap();
        let entry = cache.entry(&wav, &reader);
        assert!(entry.exists());
        // A cache hit reads the file: prove it by changing what the file holds.
        let mut marked = first.clone();
        marked.data[0] = 123.0;
        write_npy(&entry, &marked).unwrap();
        assert_eq!(reader.read(&wav_clip(&wav)).unwrap().data[0], 123.0);

        let other = ClipReader::new(FeatureSettings {
            logmel: LogMelConfig {
                n_mels: 128,
                ..LogMelConfig::default()
            },
            resample: false,
        });
        assert_ne!(
            cache.entry(&wav, &other),
            entry,
            "other settings, other entry"
        );
        // A corrupt cache file is recomputed, not trusted.
        std::fs::write(&entry, b"garbage").unwrap();
        assert_eq!(reader.read(&wav_clip(&wav)).unwrap(), first);
    }

    #[test]
    fn a_recording_handed_over_as_bytes_reads_as_the_file_does() {
        let dir = tempfile::tempdir().unwrap();
        let wav = dir.path().join("c.wav");
        write_wav(&wav, &tone(16_000, 1.0)).unwrap();
        let reader = ClipReader::new(FeatureSettings::default());
        let loaded = |bytes: Vec<u8>| crate::clip::LoadedFile {
            path: "picked/fan/train/c.wav".into(),
            bytes: bytes.into(),
        };
        let mut clip = wav_clip(&wav);
        clip.origin = Origin::WavBytes(loaded(std::fs::read(&wav).unwrap()));
        assert_eq!(
            reader.read(&clip).unwrap(),
            reader.read(&wav_clip(&wav)).unwrap()
        );
        clip.origin = Origin::WavBytes(loaded(b"RIFF....".to_vec()));
        let error = reader.read(&clip).unwrap_err().to_string();
        assert!(error.starts_with("picked/fan/train/c.wav: "), "{error}");

        let npy = dir.path().join("c.npy");
        let features = reader.read(&wav_clip(&wav)).unwrap();
        write_npy(&npy, &features).unwrap();
        clip.origin = Origin::NpyBytes(loaded(std::fs::read(&npy).unwrap()));
        assert_eq!(reader.read(&clip).unwrap(), features);
    }

    #[test]
    fn another_sample_rate_is_an_error_unless_resampling_is_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let wav = dir.path().join("b.wav");
        write_wav(&wav, &tone(22_050, 1.0)).unwrap();
        let strict = ClipReader::new(FeatureSettings::default());
        let error = strict.read(&wav_clip(&wav)).unwrap_err().to_string();
        assert!(error.contains("b.wav: sample rate 22050 Hz"), "{error}");
        assert!(error.contains("(resampling)"), "{error}");
        let lenient = ClipReader::new(FeatureSettings {
            resample: true,
            ..FeatureSettings::default()
        });
        let spectrogram = lenient.read(&wav_clip(&wav)).unwrap();
        assert_eq!(spectrogram.frames, 1 + 16_000 / 512);
    }
}
