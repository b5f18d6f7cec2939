//! Audio files in and out: WAV and FLAC decoding (integer PCM and float, any channel count
//! mixed down to mono as librosa's `mono=True` does), resampling, and writing 16-bit PCM WAV
//! as the DCASE recordings are.

use std::io::Cursor;
use std::path::Path;

use hound::{SampleFormat, WavReader, WavSpec, WavWriter};
use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Resampler};

use crate::error::{FileError, FileProblem, check_finite, write_atomically};

/// Mono audio in [-1, 1] (integer PCM scaled as soundfile does: by 2^(bits-1)).
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    pub sample_rate: u32,
    pub samples: Vec<f32>,
}

/// Reads and decodes a WAV file.
pub fn read_wav(path: &Path) -> Result<Audio, FileError> {
    let bytes = std::fs::read(path).map_err(|e| FileError::new(path, e.into()))?;
    decode_wav(&bytes).map_err(|p| FileError::new(path, p))
}

/// Reads and decodes a WAV or FLAC file, by its extension (`.flac`: FLAC; any other: WAV).
pub fn read_audio(path: &Path) -> Result<Audio, FileError> {
    read_frames(path).map(Frames::mixed)
}

/// Audio as a file holds it: every channel, interleaved, in [-1, 1].
#[derive(Debug, Clone, PartialEq)]
pub struct Frames {
    pub sample_rate: u32,
    pub channels: usize,
    pub interleaved: Vec<f32>,
}

impl Frames {
    /// The channels' mean, frame by frame.
    pub fn mixed(self) -> Audio {
        Audio {
            sample_rate: self.sample_rate,
            samples: mix_down(self.interleaved, self.channels),
        }
    }

    /// Two channels interleaved, left then right (`L R L R ...`, as seed 004's loader
    /// interleaves stereo): a mono file's one channel twice, beyond two the first two.
    pub fn stereo(&self) -> Vec<f32> {
        let channels = self.channels.max(1);
        self.interleaved
            .chunks_exact(channels)
            .flat_map(|frame| [frame[0], frame[1.min(channels - 1)]])
            .collect()
    }

    /// Each channel converted to `to` Hz ([`resample`]).
    pub fn resampled(self, to: u32) -> Result<Frames, FileProblem> {
        let channels = self.channels.max(1);
        let each: Vec<Vec<f32>> = (0..channels)
            .map(|c| {
                let samples = self.interleaved.iter().skip(c).step_by(channels).copied();
                let audio = Audio {
                    sample_rate: self.sample_rate,
                    samples: samples.collect(),
                };
                resample(&audio, to).map(|a| a.samples)
            })
            .collect::<Result<_, _>>()?;
        let frames = each.iter().map(Vec::len).min().unwrap_or(0);
        Ok(Frames {
            sample_rate: to,
            channels,
            interleaved: (0..frames)
                .flat_map(|i| each.iter().map(move |channel| channel[i]))
                .collect(),
        })
    }
}

/// Reads and decodes a WAV or FLAC file, by its extension, keeping its channels.
pub fn read_frames(path: &Path) -> Result<Frames, FileError> {
    let is_flac = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("flac"));
    let bytes = std::fs::read(path).map_err(|e| FileError::new(path, e.into()))?;
    let frames = if is_flac {
        decode_flac_frames(&bytes)
    } else {
        decode_wav_frames(&bytes)
    };
    frames.map_err(|p| FileError::new(path, p))
}

/// The longest audio a FLAC file without a sample count in its header may decode to: a
/// corrupt file of constant blocks can promise thousands of samples per byte.
const FLAC_MAX_SECONDS: u64 = 3 * 3600;

/// Decodes a whole FLAC file held in memory. Decoding stops with an error where the file
/// decodes to more samples than its header promises (or, with no count there, more than
/// three hours), so a corrupt file cannot fill memory; a file that ends before its promised
/// count is truncated.
pub fn decode_flac(bytes: &[u8]) -> Result<Audio, FileProblem> {
    decode_flac_frames(bytes).map(Frames::mixed)
}

/// [`decode_flac`], keeping the channels.
pub fn decode_flac_frames(bytes: &[u8]) -> Result<Frames, FileProblem> {
    let mut reader = claxon::FlacReader::new(Cursor::new(bytes)).map_err(flac_problem)?;
    let info = reader.streaminfo();
    let channels = info.channels as usize;
    if channels == 0 {
        return Err(FileProblem::Flac("the header gives 0 channels".into()));
    }
    let limit = info
        .samples
        .unwrap_or(FLAC_MAX_SECONDS * u64::from(info.sample_rate))
        .saturating_mul(channels as u64);
    let scale = 1.0 / (1u64 << (info.bits_per_sample.clamp(1, 32) - 1)) as f32;
    // Reserved from what the file can hold at most uncompressed-like ratios, not from the
    // header, which a corrupt file may inflate.
    let mut interleaved = Vec::with_capacity((limit as usize).min(bytes.len() * 4));
    for sample in reader.samples() {
        if interleaved.len() as u64 >= limit {
            return Err(FileProblem::Flac(format!(
                "it decodes to more than the {} samples per channel its header promises",
                limit / channels as u64
            )));
        }
        interleaved.push(sample.map_err(flac_problem)? as f32 * scale);
    }
    if let Some(promised) = info.samples
        && (interleaved.len() as u64) < promised * channels as u64
    {
        return Err(FileProblem::Flac(format!(
            "truncated: its header promises {promised} samples per channel but only {} \
             follow; the file was cut short (copy it again or remove it)",
            interleaved.len() / channels
        )));
    }
    if interleaved.len() < channels {
        return Err(FileProblem::Empty);
    }
    check_finite(&interleaved)?;
    Ok(Frames {
        sample_rate: info.sample_rate,
        channels,
        interleaved,
    })
}

fn flac_problem(error: claxon::Error) -> FileProblem {
    match error {
        claxon::Error::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            FileProblem::Flac("the file ends inside a header or a frame; it was cut short".into())
        }
        other => FileProblem::Flac(other.to_string()),
    }
}

/// Interleaved samples of `channels` channels as their mean per frame.
fn mix_down(interleaved: Vec<f32>, channels: usize) -> Vec<f32> {
    if channels == 1 {
        return interleaved;
    }
    interleaved
        .chunks_exact(channels)
        .map(|frame| frame.iter().sum::<f32>() / channels as f32)
        .collect()
}

/// Decodes a whole WAV file held in memory. The header's sample count is checked against
/// the bytes that follow it before anything is allocated, so a corrupt header cannot ask
/// for gigabytes.
pub fn decode_wav(bytes: &[u8]) -> Result<Audio, FileProblem> {
    decode_wav_frames(bytes).map(Frames::mixed)
}

/// [`decode_wav`], keeping the channels.
pub fn decode_wav_frames(bytes: &[u8]) -> Result<Frames, FileProblem> {
    let mut cursor = Cursor::new(bytes);
    let (spec, promised_samples) = {
        let reader = WavReader::new(&mut cursor).map_err(wav_problem)?;
        (reader.spec(), reader.len() as u64)
    };
    // hound stops reading the header at the start of the data chunk.
    let held = bytes.len() as u64 - cursor.position();
    let bytes_per_sample = u64::from(spec.bits_per_sample).div_ceil(8);
    let promised = promised_samples.saturating_mul(bytes_per_sample);
    if promised > held {
        return Err(FileProblem::Truncated { promised, held });
    }
    let channels = usize::from(spec.channels);
    if channels == 0 {
        return Err(FileProblem::Wav("the header gives 0 channels".into()));
    }
    if promised_samples < channels as u64 {
        return Err(FileProblem::Empty);
    }
    let mut reader = WavReader::new(Cursor::new(bytes)).map_err(wav_problem)?;
    let mut interleaved = Vec::with_capacity(promised_samples as usize);
    match spec.sample_format {
        SampleFormat::Float => {
            for s in reader.samples::<f32>() {
                interleaved.push(s.map_err(wav_problem)?);
            }
        }
        SampleFormat::Int => {
            let scale = 1.0 / (1u64 << (spec.bits_per_sample.clamp(1, 32) - 1)) as f32;
            for s in reader.samples::<i32>() {
                interleaved.push(s.map_err(wav_problem)? as f32 * scale);
            }
        }
    }
    check_finite(&interleaved)?;
    Ok(Frames {
        sample_rate: spec.sample_rate,
        channels,
        interleaved,
    })
}

fn wav_problem(error: hound::Error) -> FileProblem {
    match error {
        hound::Error::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            FileProblem::Wav("the file ends inside its header or data".into())
        }
        other => FileProblem::Wav(other.to_string()),
    }
}

/// Converts to `to` Hz with rubato's FFT resampler (fixed ratio, whole clip at once).
pub fn resample(audio: &Audio, to: u32) -> Result<Audio, FileProblem> {
    if audio.sample_rate == to {
        return Ok(audio.clone());
    }
    let bad = |e: &dyn std::fmt::Display| FileProblem::Resample(e.to_string());
    // In f64, the log-mel frontend's FFT type: in f32 the resampler instantiated rustfft's
    // FFTs a second time, and this crate's release build took 77 s of CPU instead of 48
    // (rustfft's code was 59% of its optimised IR; docs/BENCHMARKS-HISTORY.md, "CI", 2026-11-28).
    let mut resampler = Fft::<f64>::new(
        audio.sample_rate as usize,
        to as usize,
        1024,
        1,
        FixedSync::Both,
    )
    .map_err(|e| bad(&e))?;
    let samples: Vec<f64> = audio.samples.iter().map(|&s| f64::from(s)).collect();
    let frames = samples.len();
    let input = InterleavedSlice::new(&samples[..], 1, frames).map_err(|e| bad(&e))?;
    let output = resampler
        .process_all(&input, frames, None)
        .map_err(|e| bad(&e))?;
    Ok(Audio {
        sample_rate: to,
        samples: output.take_data().into_iter().map(|s| s as f32).collect(),
    })
}

/// Writes mono 16-bit PCM, atomically; samples outside [-1, 1] are clipped.
pub fn write_wav(path: &Path, audio: &Audio) -> std::io::Result<()> {
    let spec = WavSpec {
        channels: 1,
        sample_rate: audio.sample_rate,
        bits_per_sample: 16,
        sample_format: SampleFormat::Int,
    };
    write_atomically(path, |out| {
        let mut writer = WavWriter::new(out, spec).map_err(std::io::Error::other)?;
        for &s in &audio.samples {
            let v = (s.clamp(-1.0, 1.0) * 32767.0).round() as i16;
            writer.write_sample(v).map_err(std::io::Error::other)?;
        }
        writer.finalize().map_err(std::io::Error::other)
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A WAV file in memory, written by hound.
    pub(crate) fn wav_bytes(spec: WavSpec, samples: &[f32]) -> Vec<u8> {
        let mut cursor = Cursor::new(Vec::new());
        {
            let mut w = WavWriter::new(&mut cursor, spec).unwrap();
            for &s in samples {
                match (spec.sample_format, spec.bits_per_sample) {
                    (SampleFormat::Float, _) => w.write_sample(s).unwrap(),
                    (SampleFormat::Int, 16) => w.write_sample((s * 32767.0) as i16).unwrap(),
                    (SampleFormat::Int, 24) => w.write_sample((s * 8_388_607.0) as i32).unwrap(),
                    (SampleFormat::Int, b) => panic!("no test writer for {b}-bit"),
                }
            }
            w.finalize().unwrap();
        }
        cursor.into_inner()
    }

    fn spec(channels: u16, bits: u16, format: SampleFormat) -> WavSpec {
        WavSpec {
            channels,
            sample_rate: 16_000,
            bits_per_sample: bits,
            sample_format: format,
        }
    }

    #[test]
    fn pcm16_pcm24_and_float_decode_to_the_same_signal() {
        let signal: Vec<f32> = (0..800).map(|i| (i as f32 * 0.05).sin() * 0.5).collect();
        for (bits, format, tolerance) in [
            (16, SampleFormat::Int, 1e-4),
            (24, SampleFormat::Int, 1e-6),
            (32, SampleFormat::Float, 0.0),
        ] {
            let audio = decode_wav(&wav_bytes(spec(1, bits, format), &signal)).unwrap();
            assert_eq!(audio.sample_rate, 16_000);
            assert_eq!(audio.samples.len(), signal.len());
            let worst = audio
                .samples
                .iter()
                .zip(&signal)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(worst <= tolerance, "{bits}-bit: worst error {worst}");
        }
    }

    #[test]
    fn stereo_is_mixed_down_to_the_mean_of_its_channels() {
        let interleaved = [0.5, -0.5, 0.25, 0.75, -1.0, 0.0];
        let audio = decode_wav(&wav_bytes(spec(2, 32, SampleFormat::Float), &interleaved)).unwrap();
        assert_eq!(audio.samples, vec![0.0, 0.5, -0.5]);
    }

    #[test]
    fn a_truncated_file_is_named_truncated_and_an_empty_one_empty() {
        let full = wav_bytes(spec(1, 16, SampleFormat::Int), &[0.1; 1000]);
        let cut = &full[..full.len() - 500];
        assert!(
            matches!(
                decode_wav(cut),
                Err(FileProblem::Truncated {
                    promised: 2000,
                    held: 1500
                })
            ),
            "{:?}",
            decode_wav(cut)
        );
        let empty = wav_bytes(spec(1, 16, SampleFormat::Int), &[]);
        assert!(matches!(decode_wav(&empty), Err(FileProblem::Empty)));
        assert!(matches!(decode_wav(b"RIFF"), Err(FileProblem::Wav(_))));
        assert!(matches!(decode_wav(b""), Err(FileProblem::Wav(_))));
        assert!(matches!(
            decode_wav(b"this is not audio at all, just text"),
            Err(FileProblem::Wav(_))
        ));
    }

    #[test]
    fn a_header_claiming_gigabytes_is_rejected_before_allocating() {
        let mut bytes = wav_bytes(spec(1, 16, SampleFormat::Int), &[0.1; 10]);
        // The data chunk's size field sits just before its 20 bytes of samples.
        let at = bytes.len() - 20 - 4;
        bytes[at..at + 4].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        assert!(matches!(
            decode_wav(&bytes),
            Err(FileProblem::Truncated { held: 20, .. })
        ));
    }

    #[test]
    fn nan_samples_are_an_error_that_says_where() {
        let bytes = wav_bytes(spec(1, 32, SampleFormat::Float), &[0.0, 0.1, f32::NAN]);
        let error = decode_wav(&bytes).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("NaN value(s), the first at index 2"),
            "{error}"
        );
    }

    #[test]
    fn resampling_keeps_a_tone_and_scales_the_length() {
        let tone = |sr: f64, n: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (std::f64::consts::TAU * 440.0 * i as f64 / sr).sin() as f32 * 0.5)
                .collect()
        };
        let audio = Audio {
            sample_rate: 32_000,
            samples: tone(32_000.0, 32_000),
        };
        let out = resample(&audio, 16_000).unwrap();
        assert_eq!(out.sample_rate, 16_000);
        assert!(
            (out.samples.len() as i64 - 16_000).abs() <= 1,
            "{}",
            out.samples.len()
        );
        let expected = tone(16_000.0, out.samples.len());
        // Away from the edges the resampled tone is the tone at the new rate.
        let worst = out.samples[2000..14000]
            .iter()
            .zip(&expected[2000..14000])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-2, "worst error {worst}");
    }

    #[test]
    fn written_wavs_read_back_within_16_bit_quantisation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.wav");
        let audio = Audio {
            sample_rate: 16_000,
            samples: vec![0.0, 0.5, -0.5, 1.5, -1.0],
        };
        write_wav(&path, &audio).unwrap();
        let back = read_wav(&path).unwrap();
        let expected = [0.0, 0.5, -0.5, 1.0, -1.0];
        for (a, b) in back.samples.iter().zip(expected) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
        let missing = read_wav(&dir.path().join("gone.wav")).unwrap_err();
        assert!(
            missing.to_string().contains("gone.wav: cannot read it"),
            "{missing}"
        );
    }

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/")).join(name)
    }

    /// `tests/fixtures/tone_stereo.{flac,wav}` hold the same 16-bit stereo samples
    /// (`make_flac_fixture.py`): FLAC decodes to exactly what WAV does, mixed down alike.
    #[test]
    fn flac_decodes_to_the_samples_wav_holds() {
        let flac = read_audio(&fixture("tone_stereo.flac")).unwrap();
        let wav = read_audio(&fixture("tone_stereo.wav")).unwrap();
        assert_eq!(flac.sample_rate, 22_050);
        assert_eq!(
            flac.samples.len(),
            6_615,
            "0.3 s, mixed down to one channel"
        );
        assert_eq!(flac, wav);
    }

    #[test]
    fn a_cut_or_foreign_flac_file_is_refused_with_its_reason() {
        let bytes = std::fs::read(fixture("tone_stereo.flac")).unwrap();
        for cut in [bytes.len() / 2, bytes.len() - 3] {
            let problem = decode_flac(&bytes[..cut]).unwrap_err().to_string();
            assert!(
                problem.contains("cut short"),
                "cut at {cut} of {}: {problem}",
                bytes.len()
            );
        }
        let wav = std::fs::read(fixture("tone_stereo.wav")).unwrap();
        let problem = decode_flac(&wav).unwrap_err();
        assert!(matches!(problem, FileProblem::Flac(_)), "{problem}");
        let problem = read_audio(&fixture("gone.flac")).unwrap_err().to_string();
        assert!(problem.contains("gone.flac: cannot read it"), "{problem}");
    }

    #[test]
    fn stereo_interleaves_two_channels_and_doubles_a_mono_one() {
        let frames = |channels, interleaved: Vec<f32>| Frames {
            sample_rate: 8_000,
            channels,
            interleaved,
        };
        assert_eq!(
            frames(2, vec![1.0, -1.0, 0.5, 0.0]).stereo(),
            [1.0, -1.0, 0.5, 0.0]
        );
        assert_eq!(frames(1, vec![0.25, 0.5]).stereo(), [0.25, 0.25, 0.5, 0.5]);
        assert_eq!(frames(3, vec![1.0, 2.0, 3.0]).stereo(), [1.0, 2.0]);
        assert_eq!(
            frames(2, vec![1.0, -1.0, 0.5, 0.0]).mixed().samples,
            [0.0, 0.25]
        );
        // Each channel resampled on its own: a constant channel stays about constant.
        let long = frames(2, (0..4_000).flat_map(|_| [0.5, -0.25]).collect());
        let up = long.resampled(16_000).unwrap();
        assert_eq!((up.sample_rate, up.channels), (16_000, 2));
        let middle = &up.interleaved[3_000..5_000];
        assert!(
            middle
                .chunks_exact(2)
                .all(|f| (f[0] - 0.5).abs() < 0.01 && (f[1] + 0.25).abs() < 0.01)
        );
    }
}
