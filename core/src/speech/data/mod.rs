//! The speech task's data: the built-in corpus's utterances by split, their log-mel frames
//! (computed once, kept in host memory) and the train stream of shuffled epochs; the task
//! over it, and what the loop measures on the held-out splits, in `run_task`.

use std::borrow::Cow;

use burn::tensor::{Device, Tensor, TensorData};
use std::sync::atomic::{AtomicUsize, Ordering};

use headroom_datasets::FileError;
use headroom_datasets::speech::synthetic::SpeechConfig;
use headroom_datasets::speech::vocab::Vocabulary;
use headroom_datasets::{LogMel, Spectrogram};

use super::AsrConfig;
use super::corpus::{self, Source};
use crate::config::TrainConfig;
use crate::data::{
    EpochOrder, LoaderOptions, Normalization, OnBadFile, report_bad_files, side_by_side,
};
use crate::events::DatasetReport;
use crate::model::asr::Utterances;
use crate::train::{TaskData, TrainError};

mod run_task;

pub use run_task::HeldOut;

/// 25 ms windows (512 samples at 16 kHz) every 10 ms: the frames ASR toolkits use.
const HOP_S: f64 = 0.01;

/// An utterance named as a message names it: its file (or generated key) and its length.
fn name(held: &Held) -> String {
    let frames = held.frames.as_ref().map_or(0, |s| s.frames);
    format!(
        "{} ({frames} frames, {:.1} s)",
        held.source.name(),
        frames as f64 * HOP_S
    )
}

/// A held utterance with its frames, kept or computed.
type WithFrames<'h> = (&'h Held, Cow<'h, Spectrogram>);

/// One utterance as the run holds it: where it comes from and, once read, its frames.
struct Held {
    source: Source,
    /// `[mels, frames]`, as the frontend gives them (a micro-batch transposes them).
    frames: Option<Spectrogram>,
}

pub struct SpeechData {
    /// The task as the data was opened with: its corpus, its mel bands, and its vocabulary
    /// (a resumed run's saved one, or read from the train transcripts by `check`).
    config: AsrConfig,
    logmel: LogMel,
    train: Vec<Held>,
    validation: Vec<Held>,
    test: Vec<Held>,
    normalization: Normalization,
    order: EpochOrder,
    order_seed: u64,
    /// Bad files: failed on, or left out and listed.
    on_bad_file: OnBadFile,
    skipped: Vec<String>,
    /// Recordings read at another rate than the corpus's (resampled).
    resampled: AtomicUsize,
    /// Utterances per step, once each step's are sorted by length (a run split by length).
    sorted_steps: Option<usize>,
    /// The last step sorted: its first position and its slots.
    last_step: Option<(u64, Vec<usize>)>,
}

impl SpeechData {
    /// The utterance's log-mel, `[mels, frames]`, from its samples at the corpus's rate.
    fn features(&self, source: &Source) -> Result<Spectrogram, FileError> {
        features(&self.logmel, &self.config.corpus, source, &self.resampled)
    }

    /// The utterance's frames: kept since `check`, or computed now (the test split's).
    fn frames_of<'h>(&self, held: &'h Held) -> Result<Cow<'h, Spectrogram>, FileError> {
        match &held.frames {
            Some(frames) => Ok(Cow::Borrowed(frames)),
            None => self.features(&held.source).map(Cow::Owned),
        }
    }

    /// Utterances `picked`, each with its frames, as a micro-batch on `device`,
    /// standardised; their transcripts spelled with `vocabulary` (none: scoring, which
    /// compares the decoded text with the transcript and needs no tokens).
    fn batch(
        &self,
        picked: &[(&Held, &Spectrogram)],
        vocabulary: Option<&Vocabulary>,
        device: &Device,
    ) -> Result<Utterances, TrainError> {
        let mels = self.config.mels;
        let longest = picked.iter().map(|(_, s)| s.frames).max().unwrap_or(1);
        let mut values = vec![0.0f32; picked.len() * longest * mels];
        for (i, (_, s)) in picked.iter().enumerate() {
            // [mels, frames] to [frames, mels], standardised; padding stays 0.
            for m in 0..mels {
                for t in 0..s.frames {
                    values[(i * longest + t) * mels + m] = s.data[m * s.frames + t];
                }
            }
            let row = &mut values[i * longest * mels..][..s.frames * mels];
            self.normalization.apply(row);
        }
        let tokens = match vocabulary {
            Some(vocabulary) => picked
                .iter()
                .map(|(h, _)| {
                    vocabulary
                        .encode(h.source.transcript())
                        .map_err(|e| TrainError::Task(format!("{}: {e}", h.source.name())))
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => vec![Vec::new(); picked.len()],
        };
        Ok(Utterances {
            features: Tensor::from_data(
                TensorData::new(values, [picked.len(), longest, mels]),
                device,
            ),
            frames: picked.iter().map(|(_, s)| s.frames).collect(),
            tokens,
        })
    }

    /// Train slots of stream positions `first..first + count`: each epoch shuffled by the
    /// seed ([`EpochOrder`]) and, once the run's steps are split by length, each step's
    /// slots sorted by length (ties by slot), so that a micro-batch holds neighbours.
    fn slots(&mut self, first: u64, count: usize) -> Vec<usize> {
        let end = first + count as u64;
        let Some(step) = self.sorted_steps.map(|s| s.max(1) as u64) else {
            return (first..end).map(|p| self.order.slot(p)).collect();
        };
        let mut slots = Vec::with_capacity(count);
        let mut position = first;
        while position < end {
            let start = position / step * step;
            let until = end.min(start + step);
            let block = self.sorted_step(start, step);
            slots.extend(&block[(position - start) as usize..(until - start) as usize]);
            position = until;
        }
        slots
    }

    /// The slots of the step of `step` positions from `start`, sorted by length (ties by
    /// slot): kept for the step's next micro-batch, which reads the same step.
    fn sorted_step(&mut self, start: u64, step: u64) -> &[usize] {
        let kept = matches!(&self.last_step, Some((at, _)) if *at == start);
        if !kept {
            let mut block: Vec<usize> = (start..start + step).map(|p| self.order.slot(p)).collect();
            block.sort_by_key(|&i| (self.train[i].frames.as_ref().map_or(0, |s| s.frames), i));
            self.last_step = Some((start, block));
        }
        self.last_step
            .as_ref()
            .map_or(&[], |(_, block)| block.as_slice())
    }

    fn vocabulary(&self) -> Result<&Vocabulary, TrainError> {
        self.config
            .vocabulary
            .as_ref()
            .ok_or_else(|| TrainError::Task("the vocabulary was not read from the data".into()))
    }
}

/// An utterance's log-mel, `[mels, frames]`, from its samples at `corpus`'s rate; counts a
/// recording resampled.
fn features(
    logmel: &LogMel,
    corpus: &SpeechConfig,
    source: &Source,
    resampled: &AtomicUsize,
) -> Result<Spectrogram, FileError> {
    let mut converted = false;
    let audio = corpus::samples(source, corpus, corpus.sample_rate, &mut converted)?;
    if converted {
        resampled.fetch_add(1, Ordering::Relaxed);
    }
    Ok(logmel.compute(&audio.samples))
}

impl TaskData for SpeechData {
    type Batch = Utterances;

    /// Computes every train and validation utterance's frames once, fits the normalization
    /// on the train frames, and reads the vocabulary from the train transcripts unless the
    /// run has one (a resumed run keeps its saved one).
    fn check(&mut self) -> Result<(), TrainError> {
        if self.train.is_empty() {
            return Err(TrainError::EmptyTrainSplit);
        }
        let (logmel, corpus, resampled) = (&self.logmel, &self.config.corpus, &self.resampled);
        let compute = |held: &mut [Held]| -> Vec<(usize, FileError)> {
            let mut failed = Vec::new();
            for (i, h) in held.iter_mut().enumerate() {
                match features(logmel, corpus, &h.source, resampled) {
                    Ok(frames) => h.frames = Some(frames),
                    Err(e) => failed.push((i, e)),
                }
            }
            failed
        };
        for split in [&mut self.train, &mut self.validation] {
            // Two halves on two threads: making or reading the audio is most of the work.
            let middle = split.len() / 2;
            let (first, second) = split.split_at_mut(middle);
            let (mut failed, later) = side_by_side(|| compute(first), || compute(second));
            failed.extend(later.into_iter().map(|(i, e)| (i + middle, e)));
            let bad: Vec<usize> = failed.iter().map(|(i, _)| *i).collect();
            let problems = failed.into_iter().map(|(_, e)| e).collect();
            report_bad_files(problems, self.on_bad_file, &mut self.skipped)?;
            let mut at = 0;
            split.retain(|_| {
                at += 1;
                !bad.contains(&(at - 1))
            });
        }
        if self.train.is_empty() {
            return Err(TrainError::EmptyTrainSplit);
        }
        self.order = EpochOrder::new(self.order_seed, self.train.len());
        if self.config.vocabulary.is_none() {
            // Validation's characters too: a character only it holds is never trained,
            // but validation's transcripts can be spelled.
            self.config.vocabulary = Some(Vocabulary::from_transcripts(
                self.train
                    .iter()
                    .chain(&self.validation)
                    .map(|h| h.source.transcript()),
            ));
        }
        let values = self.train.iter().filter_map(|h| h.frames.as_ref());
        self.normalization = Normalization::fit(values.flat_map(|s| s.data.iter()));
        Ok(())
    }

    fn train_examples(&self) -> usize {
        self.train.len()
    }

    fn validation_examples(&self) -> usize {
        self.validation.len()
    }

    fn test_examples(&self) -> usize {
        self.test.len()
    }

    /// Stream positions are epochs of the train split, each shuffled by the seed and its
    /// number ([`EpochOrder`], as the patch stream's).
    fn micro_batch(
        &mut self,
        first: u64,
        count: usize,
        device: &Device,
    ) -> Result<Utterances, TrainError> {
        let slots = self.slots(first, count);
        let picked = slots
            .iter()
            .map(|&i| {
                let held = &self.train[i];
                let frames = held.frames.as_ref().ok_or_else(|| {
                    TrainError::Task("the train split was not read before training".into())
                })?;
                Ok((held, frames))
            })
            .collect::<Result<Vec<_>, TrainError>>()?;
        self.batch(&picked, Some(self.vocabulary()?), device)
    }

    fn lengths(&self) -> Vec<usize> {
        self.train
            .iter()
            .chain(&self.validation)
            .filter_map(|h| h.frames.as_ref().map(|s| s.frames))
            .collect()
    }

    fn longest(&self) -> Option<String> {
        let held = self.train.iter().chain(&self.validation);
        held.filter(|h| h.frames.is_some())
            .max_by_key(|h| h.frames.as_ref().map_or(0, |s| s.frames))
            .map(name)
    }

    fn leave_out_longer_than(&mut self, frames: usize) -> usize {
        let mut left_out = Vec::new();
        for split in [&mut self.train, &mut self.validation] {
            split.retain(|h| {
                let longer = h.frames.as_ref().is_some_and(|s| s.frames > frames);
                if longer {
                    left_out.push(format!(
                        "{}: longer than any plan within the memory budget can hold",
                        name(h)
                    ));
                }
                !longer
            });
        }
        self.order = EpochOrder::new(self.order_seed, self.train.len());
        self.last_step = None;
        let count = left_out.len();
        self.skipped.extend(left_out);
        count
    }

    fn lengths_at(&mut self, first: u64, count: usize) -> Vec<usize> {
        self.slots(first, count)
            .into_iter()
            .map(|i| self.train[i].frames.as_ref().map_or(0, |s| s.frames))
            .collect()
    }

    /// Once the run is split by length, each step's utterances are sorted by length.
    fn stream(&mut self, config: &TrainConfig, _: &LoaderOptions) {
        self.sorted_steps = config
            .length_buckets
            .is_some()
            .then(|| config.clips_per_step());
        self.last_step = None;
    }

    fn normalization(&self) -> Normalization {
        self.normalization
    }

    fn keep_normalization(&mut self, normalization: Normalization) {
        self.normalization = normalization;
    }

    fn report(&self, _: &TrainConfig, loader: &LoaderOptions) -> DatasetReport {
        let corpus = &self.config.corpus;
        let mut source = match &self.config.files {
            Some(files) => {
                let mut listed = format!("recordings listed by {}", files.train.display());
                for (what, path) in [("validation", &files.validation), ("test", &files.test)] {
                    if let Some(path) = path {
                        listed.push_str(&format!(", {what} by {}", path.display()));
                    }
                }
                listed
            }
            None => format!(
                "generated speech ({} speakers, seed {})",
                corpus.speakers, corpus.seed
            ),
        };
        let resampled = self.resampled.load(Ordering::Relaxed);
        if resampled > 0 {
            source.push_str(&format!(
                "; {resampled} recordings resampled to {} Hz",
                corpus.sample_rate
            ));
        }
        DatasetReport {
            source,
            machine_types: Vec::new(),
            train_clips: self.train.len(),
            validation_clips: self.validation.len(),
            test_clips: self.test.len(),
            resident: true,
            host_memory_bytes: loader.host_memory_bytes,
            skipped: self.skipped.clone(),
        }
    }

    fn skipped(&self) -> Vec<String> {
        self.skipped.clone()
    }
}
