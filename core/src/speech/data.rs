//! The speech task's data: the built-in corpus's utterances by split, their log-mel frames
//! (computed once, kept in host memory), the train stream of shuffled epochs, and what the
//! loop measures on the held-out splits.

use std::borrow::Cow;

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use std::sync::atomic::{AtomicUsize, Ordering};

use headroom_datasets::FileError;
use headroom_datasets::speech::synthetic::{SpeechConfig, SpeechSplit};
use headroom_datasets::speech::vocab::Vocabulary;
use headroom_datasets::{LogMel, LogMelConfig, Spectrogram};

use super::corpus::{self, Source};
use super::{AsrConfig, Longest};
use crate::config::TrainConfig;
use crate::data::{EpochOrder, LoaderOptions, Normalization, OnBadFile, report_bad_files};
use crate::events::{DatasetReport, Results, ResultsRow};
use crate::metrics::ErrorCount;
use crate::model::asr::{AsrNetworks, Utterances};
use crate::readback::{self, LocalFuture};
use crate::train::{EvalBatches, Evaluation, RunTask, TaskData, TrainError};

/// 25 ms windows (512 samples at 16 kHz) every 10 ms: the frames ASR toolkits use.
const HOP_S: f64 = 0.01;

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

    /// A held-out split with its frames, shortest first, in the batches `batches` makes of
    /// their lengths. A recording that cannot be read fails the split, or with bad files
    /// left out is left out and named in `skipped`.
    fn held_out<'h>(
        &self,
        split: &'h [Held],
        batches: &EvalBatches,
        skipped: &mut Vec<String>,
    ) -> Result<Vec<Vec<WithFrames<'h>>>, TrainError> {
        let mut sorted: Vec<(&Held, Cow<Spectrogram>)> = Vec::with_capacity(split.len());
        for h in split {
            match (self.frames_of(h), self.on_bad_file) {
                (Ok(frames), _) => sorted.push((h, frames)),
                (Err(e), OnBadFile::Skip) => skipped.push(e.to_string()),
                (Err(e), OnBadFile::Fail) => return Err(e.into()),
            }
        }
        sorted.sort_by_key(|(_, s)| s.frames);
        let lengths: Vec<usize> = sorted.iter().map(|(_, s)| s.frames).collect();
        let mut rest = sorted.into_iter();
        Ok(batches
            .sizes(&lengths)
            .into_iter()
            .map(|size| rest.by_ref().take(size).collect())
            .collect())
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

    /// Character and word errors of greedy CTC decoding over `split`, in `batches`
    /// (shortest first: less padding).
    async fn errors(
        &self,
        networks: &AsrNetworks,
        split: &[Held],
        device: &Device,
        batches: &EvalBatches,
        skipped: &mut Vec<String>,
    ) -> Result<Scored, TrainError> {
        let vocabulary = self.vocabulary()?;
        let mut scored = Scored::default();
        for part in self.held_out(split, batches, skipped)? {
            let picked: Vec<(&Held, &Spectrogram)> = part.iter().map(|(h, s)| (*h, &**s)).collect();
            let batch = self.batch(&picked, None, device)?;
            let (paths, lengths) = networks.ctc_best_path(batch.features, &batch.frames);
            let [_, steps] = paths.dims();
            let paths = readback::floats(paths).await?;
            for (i, (held, _)) in part.iter().enumerate() {
                let path: Vec<usize> = paths[i * steps..][..lengths[i]]
                    .iter()
                    .map(|&t| t as usize)
                    .collect();
                let heard = vocabulary.decode(&super::collapse(&path));
                let said = headroom_datasets::speech::vocab::normalise(held.source.transcript());
                if vocabulary.encode(&said).is_err() {
                    scored.unknown += 1;
                }
                scored.characters.add(ErrorCount::characters(&said, &heard));
                scored.words.add(ErrorCount::words(&said, &heard));
                scored.utterances += 1;
            }
        }
        Ok(scored)
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

/// What greedy decoding scored on a split.
#[derive(Debug, Default)]
struct Scored {
    characters: ErrorCount,
    words: ErrorCount,
    utterances: usize,
    /// Utterances whose transcript holds characters the vocabulary lacks.
    unknown: usize,
}

impl RunTask for AsrConfig {
    type Data = SpeechData;

    fn open(
        self,
        config: &TrainConfig,
        loader: &LoaderOptions,
    ) -> Result<(Self, SpeechData), TrainError> {
        let mut skipped = Vec::new();
        let [train, validation, test] = match &self.files {
            Some(files) => corpus::list(
                files,
                config.validation_every_nth_clip,
                loader.on_bad_file,
                &mut skipped,
            )?,
            None => {
                let keys = self.corpus.keys();
                [
                    SpeechSplit::Train,
                    SpeechSplit::Validation,
                    SpeechSplit::Test,
                ]
                .map(|split| {
                    keys.iter()
                        .filter(|k| k.split == split)
                        .map(|k| Source::Generated(k.clone()))
                        .collect()
                })
            }
        };
        let held = |sources: Vec<Source>| -> Vec<Held> {
            sources
                .into_iter()
                .map(|source| Held {
                    source,
                    frames: None,
                })
                .collect()
        };
        let sample_rate = self.corpus.sample_rate;
        let data = SpeechData {
            config: self.clone(),
            logmel: LogMel::new(LogMelConfig {
                sample_rate,
                n_fft: 512,
                hop: (f64::from(sample_rate) * HOP_S) as usize,
                n_mels: self.mels,
            }),
            order: EpochOrder::new(config.seed, train.len()),
            order_seed: config.seed,
            on_bad_file: loader.on_bad_file,
            skipped,
            resampled: AtomicUsize::new(0),
            sorted_steps: None,
            last_step: None,
            train: held(train),
            validation: held(validation),
            test: held(test),
            normalization: Normalization {
                mean: 0.0,
                std: 1.0,
            },
        };
        Ok((self, data))
    }

    /// The vocabulary `check` read from the train transcripts, and the longest utterance
    /// the run holds.
    fn for_data(mut self, data: &SpeechData) -> Result<Self, TrainError> {
        self.vocabulary = data.config.vocabulary.clone();
        let held = data.train.iter().chain(&data.validation);
        self.longest = Longest {
            frames: held
                .clone()
                .filter_map(|h| h.frames.as_ref().map(|s| s.frames))
                .max()
                .unwrap_or(1),
            characters: held
                .map(|h| h.source.transcript().chars().count())
                .max()
                .unwrap_or(1),
        };
        Ok(self)
    }

    fn validation_loss<'a>(
        &'a self,
        networks: &'a AsrNetworks,
        data: &'a SpeechData,
        device: &'a Device,
        batches: &'a EvalBatches,
    ) -> LocalFuture<'a, Result<f64, TrainError>> {
        Box::pin(async move {
            let networks = networks.valid();
            let vocabulary = data.vocabulary()?;
            let (mut sum, mut n) = (0.0, 0usize);
            // Validation is read in `check`: nothing is left out here.
            for part in data.held_out(&data.validation, batches, &mut Vec::new())? {
                let picked: Vec<(&Held, &Spectrogram)> =
                    part.iter().map(|(h, s)| (*h, &**s)).collect();
                let batch = data.batch(&picked, Some(vocabulary), device)?;
                let loss = networks.loss(batch, self.ctc_weight, Vocabulary::BOUNDARY);
                sum += f64::from(readback::scalar(loss.total).await?) * part.len() as f64;
                n += part.len();
            }
            Ok(sum / n.max(1) as f64)
        })
    }

    /// CER and WER of greedy CTC decoding on the validation and test splits.
    fn evaluate<'a>(
        &'a self,
        networks: &'a AsrNetworks,
        data: &'a SpeechData,
        device: &'a Device,
        batches: &'a EvalBatches,
        skipped: Vec<String>,
    ) -> LocalFuture<'a, Result<Evaluation, TrainError>> {
        Box::pin(async move {
            let networks = networks.valid();
            let mut skipped = skipped;
            let mut rows = Vec::new();
            let mut about = String::from(
                "greedy CTC decoding; CER and WER: edits over the references' characters and \
                 words",
            );
            for (label, split) in [("validation", &data.validation), ("test", &data.test)] {
                if split.is_empty() {
                    continue;
                }
                let scored = data
                    .errors(&networks, split, device, batches, &mut skipped)
                    .await?;
                if scored.unknown > 0 {
                    about.push_str(&format!(
                        "; {} {label} utterances hold characters the train transcripts do \
                         not (counted as errors: the model cannot spell them)",
                        scored.unknown
                    ));
                }
                rows.push(ResultsRow {
                    label: label.into(),
                    examples: scored.utterances,
                    values: vec![
                        scored.characters.rate().unwrap_or(f64::NAN),
                        scored.words.rate().unwrap_or(f64::NAN),
                    ],
                });
            }
            Ok(Evaluation::Results(Results {
                about,
                measures: vec!["CER".into(), "WER".into()],
                rows,
                skipped,
            }))
        })
    }
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
            // Two halves on two threads: making or reading the audio is most of the work. A
            // web page's WebAssembly has one thread.
            #[cfg(not(target_arch = "wasm32"))]
            let failed = {
                let middle = split.len() / 2;
                let (first, second) = split.split_at_mut(middle);
                let (mut failed, later) = std::thread::scope(|scope| {
                    let first = scope.spawn(|| compute(first));
                    let later = compute(second);
                    (
                        first
                            .join()
                            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                        later,
                    )
                });
                failed.extend(later.into_iter().map(|(i, e)| (i + middle, e)));
                failed
            };
            #[cfg(target_arch = "wasm32")]
            let failed = compute(split);
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
        let (h, frames) = held
            .filter_map(|h| h.frames.as_ref().map(|s| (h, s.frames)))
            .max_by_key(|(_, frames)| *frames)?;
        Some(format!(
            "{} ({frames} frames, {:.1} s)",
            h.source.name(),
            frames as f64 * HOP_S
        ))
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
