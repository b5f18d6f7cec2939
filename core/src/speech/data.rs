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
use crate::train::{Evaluation, RunTask, TaskData, TrainError};

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
}

impl SpeechData {
    /// The utterance's log-mel, `[mels, frames]`.
    fn features(&self, key: &SpeechKey) -> Spectrogram {
        self.logmel.compute(&self.config.corpus.audio(key).samples)
    }

    /// Utterances `picked` of `split` as a micro-batch on `device`, standardised; their
    /// transcripts spelled with `vocabulary`.
    fn batch(
        &self,
        picked: &[&Held],
        vocabulary: &Vocabulary,
        device: &Device,
    ) -> Result<Utterances, TrainError> {
        let mels = self.config.mels;
        // The test split's frames are computed when scored, not kept.
        let spectrograms: Vec<Cow<Spectrogram>> = picked
            .iter()
            .map(|h| match &h.frames {
                Some(frames) => Cow::Borrowed(frames),
                None => Cow::Owned(self.features(&h.key)),
            })
            .collect();
        let longest = spectrograms.iter().map(|s| s.frames).max().unwrap_or(1);
        let mut values = vec![0.0f32; picked.len() * longest * mels];
        for (i, s) in spectrograms.iter().enumerate() {
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
            .map(|h| vocabulary.encode(&h.key.transcript))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TrainError::Task(e.to_string()))?;
        Ok(Utterances {
            features: Tensor::from_data(
                TensorData::new(values, [picked.len(), longest, mels]),
                device,
            ),
            frames: spectrograms.iter().map(|s| s.frames).collect(),
            tokens,
        })
    }

    fn vocabulary(&self) -> Result<&Vocabulary, TrainError> {
        self.config
            .vocabulary
            .as_ref()
            .ok_or_else(|| TrainError::Task("the vocabulary was not read from the data".into()))
    }

    /// Character and word errors of greedy CTC decoding over `split`, `chunk` utterances
    /// at once, shortest first (less padding).
    async fn errors(
        &self,
        networks: &AsrNetworks,
        split: &[Held],
        device: &Device,
        chunk: usize,
    ) -> Result<(ErrorCount, ErrorCount), TrainError> {
        let vocabulary = self.vocabulary()?;
        let mut order: Vec<&Held> = split.iter().collect();
        order.sort_by_key(|h| h.frames.as_ref().map_or(0, |s| s.frames));
        let (mut characters, mut words) = (ErrorCount::default(), ErrorCount::default());
        for part in order.chunks(chunk.max(1)) {
            let batch = self.batch(part, vocabulary, device)?;
            let (paths, lengths) = networks.ctc_best_path(batch.features, &batch.frames);
            let [_, steps] = paths.dims();
            let paths = readback::floats(paths).await?;
            for (i, held) in part.iter().enumerate() {
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
        chunk: usize,
    ) -> LocalFuture<'a, Result<f64, TrainError>> {
        Box::pin(async move {
            let networks = networks.valid();
            let vocabulary = data.vocabulary()?;
            let held: Vec<&Held> = data.validation.iter().collect();
            let (mut sum, mut n) = (0.0, 0usize);
            for part in held.chunks(chunk.max(1)) {
                let batch = data.batch(part, vocabulary, device)?;
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
        chunk: usize,
        skipped: Vec<String>,
    ) -> LocalFuture<'a, Result<Evaluation, TrainError>> {
        Box::pin(async move {
            let networks = networks.valid();
            let mut rows = Vec::new();
            for (label, split) in [("validation", &data.validation), ("test", &data.test)] {
                if split.is_empty() {
                    continue;
                }
                let (characters, words) = data.errors(&networks, split, device, chunk).await?;
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
        let picked: Vec<usize> = (first..first + count as u64)
            .map(|position| self.order.slot(position))
            .collect();
        let held: Vec<&Held> = picked.iter().map(|&i| &self.train[i]).collect();
        self.batch(&held, self.vocabulary()?, device)
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
