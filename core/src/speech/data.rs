//! The speech task's data: the built-in corpus's utterances by split, their log-mel frames
//! (computed once, kept in host memory), the train stream of shuffled epochs, and what the
//! loop measures on the held-out splits.

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use headroom_datasets::speech::synthetic::{SpeechKey, SpeechSplit};
use headroom_datasets::speech::vocab::Vocabulary;
use headroom_datasets::{LogMel, LogMelConfig, Spectrogram};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::{AsrConfig, Longest};
use crate::config::TrainConfig;
use crate::data::{LoaderOptions, Normalization};
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
    /// `[frames, mels]`, frame-major: a micro-batch copies rows.
    frames: Option<Spectrogram>,
}

pub struct SpeechData {
    config: AsrConfig,
    seed: u64,
    train: Vec<Held>,
    validation: Vec<Held>,
    test: Vec<Held>,
    normalization: Normalization,
    /// The train split's order in the epoch the last micro-batch was drawn from.
    order: (u64, Vec<usize>),
}

impl SpeechData {
    fn logmel(&self) -> LogMel {
        let sample_rate = self.config.corpus.sample_rate;
        LogMel::new(LogMelConfig {
            sample_rate,
            n_fft: 512,
            hop: (f64::from(sample_rate) * HOP_S) as usize,
            n_mels: self.config.mels,
        })
    }

    /// The utterance's log-mel, `[mels, frames]` as the frontend gives it.
    fn features(&self, key: &SpeechKey) -> Spectrogram {
        self.logmel()
            .compute(&self.config.corpus.audio(key).samples)
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
        let computed: Vec<Spectrogram>;
        let spectrograms: Vec<&Spectrogram> = if picked.iter().all(|h| h.frames.is_some()) {
            picked.iter().filter_map(|h| h.frames.as_ref()).collect()
        } else {
            computed = picked.iter().map(|h| self.features(&h.key)).collect();
            computed.iter().collect()
        };
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
        let data = SpeechData {
            config: self.clone(),
            seed: config.seed,
            train: held(SpeechSplit::Train),
            validation: held(SpeechSplit::Validation),
            test: held(SpeechSplit::Test),
            normalization: Normalization {
                mean: 0.0,
                std: 1.0,
            },
            order: (u64::MAX, Vec::new()),
        };
        Ok((self, data))
    }

    /// The vocabulary of the train transcripts, and the longest utterance the run holds.
    fn for_data(mut self, data: &SpeechData) -> Result<Self, TrainError> {
        self.vocabulary = Some(Vocabulary::from_transcripts(
            data.train.iter().map(|h| h.key.transcript.as_str()),
        ));
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

    /// Computes every train and validation utterance's frames once, and fits the
    /// normalization on the train frames.
    fn check(&mut self) -> Result<(), TrainError> {
        let logmel = self.logmel();
        let corpus = self.config.corpus.clone();
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
        if self.train.is_empty() {
            return Err(TrainError::EmptyTrainSplit);
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

    /// Takes the run's vocabulary: a fresh run's was read from the train transcripts after
    /// the data was opened (`for_data`), and the configuration holds it since.
    fn stream(&mut self, config: &TrainConfig, _: &LoaderOptions) {
        if let Ok(task) = config.model.config::<AsrConfig>()
            && task.vocabulary.is_some()
        {
            self.config.vocabulary = task.vocabulary;
        }
    }

    /// Stream positions are epochs of the train split, each shuffled by the seed and its
    /// number: a resumed run draws what the uninterrupted one would have.
    fn micro_batch(
        &mut self,
        first: u64,
        count: usize,
        device: &Device,
    ) -> Result<Utterances, TrainError> {
        let n = self.train.len() as u64;
        let mut picked = Vec::with_capacity(count);
        for position in first..first + count as u64 {
            let epoch = position / n;
            if self.order.0 != epoch {
                let mut order: Vec<usize> = (0..n as usize).collect();
                order.shuffle(&mut ChaCha8Rng::seed_from_u64(
                    self.seed ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                ));
                self.order = (epoch, order);
            }
            picked.push(self.order.1[(position % n) as usize]);
        }
        let held: Vec<&Held> = picked.iter().map(|&i| &self.train[i]).collect();
        let vocabulary = self.vocabulary()?.clone();
        self.batch(&held, &vocabulary, device)
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
