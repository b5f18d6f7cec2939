//! The speech task's data: the built-in corpus's utterances by split, their log-mel frames
//! (computed once, kept in host memory), the train stream of shuffled epochs, and what the
//! loop measures on the held-out splits.

use std::borrow::Cow;

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use headroom_datasets::speech::synthetic::{SpeechKey, SpeechSplit};
use headroom_datasets::speech::vocab::Vocabulary;
use headroom_datasets::{LogMel, LogMelConfig, Spectrogram};

use super::{AsrConfig, Longest};
use crate::config::TrainConfig;
use crate::data::{EpochOrder, LoaderOptions, Normalization};
use crate::events::{DatasetReport, Results, ResultsRow};
use crate::metrics::ErrorCount;
use crate::model::asr::{AsrNetworks, Utterances};
use crate::readback::{self, LocalFuture};
use crate::train::{EvalBatches, Evaluation, RunTask, TaskData, TrainError};

/// 25 ms windows (512 samples at 16 kHz) every 10 ms: the frames ASR toolkits use.
const HOP_S: f64 = 0.01;

/// One utterance as the run holds it: its transcript and, once read, its frames.
struct Held {
    key: SpeechKey,
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
    /// Utterances per step, once each step's are sorted by length (a run split by length).
    sorted_steps: Option<usize>,
}

impl SpeechData {
    /// The utterance's log-mel, `[mels, frames]`.
    fn features(&self, key: &SpeechKey) -> Spectrogram {
        self.logmel.compute(&self.config.corpus.audio(key).samples)
    }

    /// The utterance's frames: kept since `check`, or computed now (the test split's).
    fn frames_of<'h>(&self, held: &'h Held) -> Cow<'h, Spectrogram> {
        match &held.frames {
            Some(frames) => Cow::Borrowed(frames),
            None => Cow::Owned(self.features(&held.key)),
        }
    }

    /// Utterances `picked`, each with its frames, as a micro-batch on `device`,
    /// standardised; their transcripts spelled with `vocabulary`.
    fn batch(
        &self,
        picked: &[(&Held, &Spectrogram)],
        vocabulary: &Vocabulary,
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
        let tokens = picked
            .iter()
            .map(|(h, _)| vocabulary.encode(&h.key.transcript))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TrainError::Task(e.to_string()))?;
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
    /// their lengths.
    fn held_out<'h>(
        &self,
        split: &'h [Held],
        batches: &EvalBatches,
    ) -> Vec<Vec<(&'h Held, Cow<'h, Spectrogram>)>> {
        let mut sorted: Vec<(&Held, Cow<Spectrogram>)> =
            split.iter().map(|h| (h, self.frames_of(h))).collect();
        sorted.sort_by_key(|(_, s)| s.frames);
        let lengths: Vec<usize> = sorted.iter().map(|(_, s)| s.frames).collect();
        let mut rest = sorted.into_iter();
        batches
            .sizes(&lengths)
            .into_iter()
            .map(|size| rest.by_ref().take(size).collect())
            .collect()
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
            let mut block: Vec<usize> = (start..start + step).map(|p| self.order.slot(p)).collect();
            block.sort_by_key(|&i| (self.train[i].frames.as_ref().map_or(0, |s| s.frames), i));
            let until = end.min(start + step);
            slots.extend(&block[(position - start) as usize..(until - start) as usize]);
            position = until;
        }
        slots
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
    ) -> Result<(ErrorCount, ErrorCount), TrainError> {
        let vocabulary = self.vocabulary()?;
        let (mut characters, mut words) = (ErrorCount::default(), ErrorCount::default());
        for part in self.held_out(split, batches) {
            let picked: Vec<(&Held, &Spectrogram)> = part.iter().map(|(h, s)| (*h, &**s)).collect();
            let batch = self.batch(&picked, vocabulary, device)?;
            let (paths, lengths) = networks.ctc_best_path(batch.features, &batch.frames);
            let [_, steps] = paths.dims();
            let paths = readback::floats(paths).await?;
            for (i, (held, _)) in part.iter().enumerate() {
                let path: Vec<usize> = paths[i * steps..][..lengths[i]]
                    .iter()
                    .map(|&t| t as usize)
                    .collect();
                let heard = vocabulary.decode(&super::collapse(&path));
                let said = headroom_datasets::speech::vocab::normalise(&held.key.transcript);
                characters.add(ErrorCount::characters(&said, &heard));
                words.add(ErrorCount::words(&said, &heard));
            }
        }
        Ok((characters, words))
    }
}

impl RunTask for AsrConfig {
    type Data = SpeechData;

    fn open(
        self,
        config: &TrainConfig,
        _: &LoaderOptions,
    ) -> Result<(Self, SpeechData), TrainError> {
        let held = |split| {
            self.corpus
                .keys()
                .into_iter()
                .filter(|k| k.split == split)
                .map(|key| Held { key, frames: None })
                .collect::<Vec<_>>()
        };
        let sample_rate = self.corpus.sample_rate;
        let train = held(SpeechSplit::Train);
        let data = SpeechData {
            config: self.clone(),
            logmel: LogMel::new(LogMelConfig {
                sample_rate,
                n_fft: 512,
                hop: (f64::from(sample_rate) * HOP_S) as usize,
                n_mels: self.mels,
            }),
            order: EpochOrder::new(config.seed, train.len()),
            sorted_steps: None,
            train,
            validation: held(SpeechSplit::Validation),
            test: held(SpeechSplit::Test),
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
                .map(|h| h.key.transcript.chars().count())
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
            for part in data.held_out(&data.validation, batches) {
                let picked: Vec<(&Held, &Spectrogram)> =
                    part.iter().map(|(h, s)| (*h, &**s)).collect();
                let batch = data.batch(&picked, vocabulary, device)?;
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
            let mut rows = Vec::new();
            for (label, split) in [("validation", &data.validation), ("test", &data.test)] {
                if split.is_empty() {
                    continue;
                }
                let (characters, words) = data.errors(&networks, split, device, batches).await?;
                rows.push(ResultsRow {
                    label: label.into(),
                    examples: split.len(),
                    values: vec![
                        characters.rate().unwrap_or(f64::NAN),
                        words.rate().unwrap_or(f64::NAN),
                    ],
                });
            }
            Ok(Evaluation::Results(Results {
                about: "greedy CTC decoding; CER and WER: edits over the references' characters \
                        and words"
                    .into(),
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
        let logmel = &self.logmel;
        let corpus = &self.config.corpus;
        let compute = |held: &mut [Held]| {
            for h in held {
                h.frames = Some(logmel.compute(&corpus.audio(&h.key).samples));
            }
        };
        for split in [&mut self.train, &mut self.validation] {
            // Two halves on two threads: generating the audio is most of the work. A web
            // page's WebAssembly has one thread.
            #[cfg(not(target_arch = "wasm32"))]
            {
                let middle = split.len() / 2;
                let (first, second) = split.split_at_mut(middle);
                std::thread::scope(|scope| {
                    scope.spawn(|| compute(first));
                    compute(second);
                });
            }
            #[cfg(target_arch = "wasm32")]
            compute(split);
        }
        if self.config.vocabulary.is_none() {
            self.config.vocabulary = Some(Vocabulary::from_transcripts(
                self.train.iter().map(|h| h.key.transcript.as_str()),
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
        self.batch(&picked, self.vocabulary()?, device)
    }

    fn lengths(&self) -> Vec<usize> {
        self.train
            .iter()
            .chain(&self.validation)
            .filter_map(|h| h.frames.as_ref().map(|s| s.frames))
            .collect()
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
    }

    fn normalization(&self) -> Normalization {
        self.normalization
    }

    fn keep_normalization(&mut self, normalization: Normalization) {
        self.normalization = normalization;
    }

    fn report(&self, _: &TrainConfig, loader: &LoaderOptions) -> DatasetReport {
        DatasetReport {
            source: format!(
                "generated speech ({} speakers, seed {})",
                self.config.corpus.speakers, self.config.corpus.seed
            ),
            machine_types: Vec::new(),
            train_clips: self.train.len(),
            validation_clips: self.validation.len(),
            test_clips: self.test.len(),
            resident: true,
            host_memory_bytes: loader.host_memory_bytes,
            skipped: Vec::new(),
        }
    }
}
