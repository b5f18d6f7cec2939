//! The recogniser's task over its data: opening the corpus's splits, fitting the task to
//! what was read (vocabulary, longest utterance), and what the loop measures on the held-out
//! splits (validation loss, and CER and WER by greedy CTC and attention decoding).

use std::borrow::Cow;

use burn::module::Module;
use burn::tensor::Device;

use std::sync::atomic::AtomicUsize;

use headroom_datasets::speech::synthetic::SpeechSplit;
use headroom_datasets::speech::vocab::Vocabulary;
use headroom_datasets::{LogMel, LogMelConfig, Spectrogram};

use super::super::corpus::{self, Source};
use super::super::decode;
use super::super::{AsrConfig, Longest};
use super::{HOP_S, Held, SpeechData, WithFrames};
use crate::config::TrainConfig;
use crate::data::{EpochOrder, LoaderOptions, Normalization, OnBadFile};
use crate::events::{Results, ResultsRow};
use crate::metrics::ErrorCount;
use crate::model::asr::AsrNetworks;
use crate::readback::{self, LocalFuture};
use crate::train::{EvalBatches, Evaluation, RunTask, TrainError};

impl SpeechData {
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

    /// Character and word errors of greedy CTC and attention decoding over `split`, in
    /// `batches` (shortest first: less padding).
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
            let (encoded, lengths) = networks.encode(batch.features, &batch.frames);
            let paths = networks.ctc_best_path(encoded.clone());
            let [_, steps] = paths.dims();
            let paths = readback::floats(paths).await?;
            let ctc: Vec<Vec<usize>> = lengths
                .iter()
                .enumerate()
                .map(|(i, &frames)| {
                    let path: Vec<usize> = paths[i * steps..][..frames]
                        .iter()
                        .map(|&t| t as usize)
                        .collect();
                    decode::collapse(&path)
                })
                .collect();
            let most: Vec<usize> = ctc
                .iter()
                .zip(&lengths)
                .map(|(tokens, &frames)| decode::most_tokens(tokens.len(), frames))
                .collect();
            let attended =
                decode::attention_greedy(networks, encoded, &lengths, Vocabulary::BOUNDARY, &most)
                    .await?;
            for (i, (held, _)) in part.iter().enumerate() {
                let heard = vocabulary.decode(&ctc[i]);
                let said = headroom_datasets::speech::vocab::normalise(held.source.transcript());
                if vocabulary.encode(&said).is_err() {
                    scored.unknown += 1;
                }
                scored.ctc.add(&said, &heard);
                scored
                    .attention
                    .add(&said, &vocabulary.decode(&attended[i]));
                scored.utterances += 1;
            }
        }
        Ok(scored)
    }
}

/// A held-out split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldOut {
    Validation,
    Test,
}

impl SpeechData {
    /// The utterances of a held-out split with their transcripts' tokens, in the micro-batches
    /// `batches` makes of their lengths, shortest first: what a task other than the
    /// recogniser (a contrastive model of utterances and transcripts) measures on them. A
    /// recording that cannot be read fails the split, or with bad files left out is named in
    /// `skipped`; a transcript with characters the vocabulary lacks fails it, named.
    pub(crate) fn held_out_batches(
        &self,
        split: HeldOut,
        batches: &EvalBatches,
        device: &Device,
        skipped: &mut Vec<String>,
    ) -> Result<Vec<crate::model::asr::Utterances>, TrainError> {
        let vocabulary = self.vocabulary()?;
        let held = match split {
            HeldOut::Validation => &self.validation,
            HeldOut::Test => &self.test,
        };
        self.held_out(held, batches, skipped)?
            .iter()
            .map(|part| {
                let picked: Vec<(&Held, &Spectrogram)> =
                    part.iter().map(|(h, s)| (*h, &**s)).collect();
                self.batch(&picked, Some(vocabulary), device)
            })
            .collect()
    }
}

/// What greedy decoding scored on a split, each way.
#[derive(Debug, Default)]
struct Scored {
    ctc: Errors,
    attention: Errors,
    utterances: usize,
    /// Utterances whose transcript holds characters the vocabulary lacks.
    unknown: usize,
}

/// Edits over the references' characters and words.
#[derive(Debug, Default)]
struct Errors {
    characters: ErrorCount,
    words: ErrorCount,
}

impl Errors {
    fn add(&mut self, said: &str, heard: &str) {
        self.characters.add(ErrorCount::characters(said, heard));
        self.words.add(ErrorCount::words(said, heard));
    }

    fn rates(&self) -> [f64; 2] {
        [&self.characters, &self.words].map(|count| count.rate().unwrap_or(f64::NAN))
    }
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

    /// CER and WER of greedy CTC and attention decoding on the validation and test splits.
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
                "greedy CTC decoding, and greedy attention decoding (the decoder's most likely \
                 next character until it ends the transcript); CER and WER: edits over the \
                 references' characters and words",
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
                    values: [scored.ctc.rates(), scored.attention.rates()].concat(),
                });
            }
            Ok(Evaluation::Results(Results {
                about,
                measures: ["CER", "WER", "attention CER", "attention WER"]
                    .map(String::from)
                    .to_vec(),
                rows,
                skipped,
            }))
        })
    }
}
