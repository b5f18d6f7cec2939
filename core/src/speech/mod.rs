//! Speech recognition as a kind of training: the recogniser of
//! [`crate::model::asr`] trained on utterances of every length, each a whole example (no
//! patches), and measured by its character and word error rates. Its data is the built-in
//! generated corpus (`headroom_datasets::speech::synthetic`) or recordings listed per split
//! ([`corpus`]); its module is the whole of what this kind adds to the engine, with its line
//! in `crate::registry`.
//!
//! Planned by length (`crate::plan::lengths`): [`TrainingTask::at_length`] gives the planner
//! measuring batches of any length, and the data sorts each step's utterances by length so
//! that the loop packs them by the plan's buckets. A count per micro-batch given by hand is
//! planned at the run's longest utterance instead.

pub mod corpus;
mod data;
mod decode;

use burn::tensor::{Device, Tensor, TensorData};
use headroom_datasets::speech::synthetic::SpeechConfig;
use headroom_datasets::speech::vocab::Vocabulary;
use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::config::TrainConfig;
use crate::model::StepLoss;
use crate::model::asr::{AsrNetworks, AsrShape, SUBSAMPLING, Utterances};
use crate::model::{AnalyticStep, DefaultBatch, ModelInfo, ModelSpec, NamedConfig, PatchShape};
use crate::precision::Precision;
use crate::task::{StepContext, TrainingTask};
use crate::train::BuiltIn;

pub use corpus::SpeechFiles;
pub use data::{HeldOut, SpeechData};
pub use decode::collapse;

/// A recogniser run: its sizes, its features, its loss, its corpus and, once the train
/// transcripts are read, its vocabulary and longest utterance (saved with every checkpoint).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AsrConfig {
    pub shape: AsrShape,
    pub mels: usize,
    /// CTC's share of the loss (the decoder's is the rest), as ESPnet's `ctc_weight`.
    pub ctc_weight: f64,
    /// The generated corpus; with `files`, only its sample rate counts (recordings at
    /// another are resampled to it).
    pub corpus: SpeechConfig,
    /// Recordings instead of the generated corpus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<SpeechFiles>,
    /// The train transcripts' characters; `None` until the data is read.
    pub vocabulary: Option<Vocabulary>,
    /// The longest train or validation utterance, in frames and in characters: what the
    /// planner measures.
    pub longest: Longest,
}

/// The recogniser's presets by name: `large` is seed 002's d_model 256 with 12 encoder and 6
/// decoder layers, `medium` 192 / 8 / 4, `small` 128 / 6 / 3, `tiny` the CPU default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AsrSize {
    Tiny,
    Small,
    Medium,
    Large,
}

impl AsrSize {
    pub fn shape(self) -> AsrShape {
        match self {
            AsrSize::Tiny => AsrShape::TINY,
            AsrSize::Small => AsrShape::SMALL,
            AsrSize::Medium => AsrShape::MEDIUM,
            AsrSize::Large => AsrShape::LARGE,
        }
    }
}

/// The longest utterance a run holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Longest {
    pub frames: usize,
    pub characters: usize,
}

impl Default for AsrConfig {
    fn default() -> Self {
        Self {
            shape: AsrShape::TINY,
            mels: 80,
            ctc_weight: 0.3,
            corpus: SpeechConfig::default(),
            files: None,
            vocabulary: None,
            // 20 s at a 10 ms hop, 300 characters, until the data says.
            longest: Longest {
                frames: 2_000,
                characters: 300,
            },
        }
    }
}

impl AsrConfig {
    /// Tokens the networks predict: the vocabulary's, or the built-in corpus's alphabet
    /// before the data is read.
    pub(crate) fn tokens(&self) -> usize {
        self.vocabulary.as_ref().map_or(
            headroom_datasets::speech::synthetic::LETTERS.len() + 1 + 2,
            Vocabulary::len,
        )
    }
}

impl NamedConfig for AsrConfig {
    const NAME: &'static str = "asr-transformer";
}

impl TrainingTask for AsrConfig {
    type Networks = AsrNetworks;
    type Batch = Utterances;

    fn phases(&self) -> &'static [&'static str] {
        &["recogniser"]
    }

    fn cut_into_patches(&self) -> bool {
        false
    }

    /// f32 throughout: the recogniser does not compute in half precision yet.
    fn mixed_precision(&self) -> bool {
        false
    }

    fn networks(&self, device: &Device) -> AsrNetworks {
        AsrNetworks::new(self.shape, self.mels, self.tokens(), device)
    }

    fn examples_in(&self, batch: &Utterances) -> usize {
        batch.len()
    }

    /// Utterances as long as the run's longest, with transcripts as long as its longest.
    fn measuring_batch(&self, examples: usize, device: &Device) -> Utterances {
        let Longest { frames, characters } = self.longest;
        let tokens = self.tokens();
        Utterances {
            features: Tensor::from_data(
                TensorData::new(
                    measuring_features(examples * frames * self.mels),
                    [examples, frames, self.mels],
                ),
                device,
            ),
            frames: vec![frames; examples],
            tokens: (0..examples)
                .map(|e| {
                    (0..characters)
                        .map(|i| Vocabulary::BOUNDARY + 1 + (e + i) % (tokens - 2).max(1))
                        .collect()
                })
                .collect(),
        }
    }

    /// Transcripts as long as the run's longest in characters per frame.
    fn at_length(&self, frames: usize) -> Option<Self> {
        let Longest {
            frames: longest,
            characters,
        } = self.longest;
        let frames = frames.max(1);
        Some(Self {
            longest: Longest {
                frames,
                characters: (characters * frames).div_ceil(longest.max(1)).max(1),
            },
            ..self.clone()
        })
    }

    fn loss(
        &self,
        networks: &AsrNetworks,
        _: usize,
        batch: Utterances,
        _: StepContext,
    ) -> StepLoss {
        let loss = networks.loss(batch, self.ctc_weight, Vocabulary::BOUNDARY);
        StepLoss {
            total: loss.total,
            reported: loss.ctc,
        }
    }

    fn parameters(&self) -> u64 {
        self.shape.parameters(self.mels, self.tokens())
    }

    /// What autodiff keeps grows with the frames and, in attention, with their square: a
    /// rough account for the plan's breakdown; calibration measures the real one.
    fn step_memory(&self, _: BackendKind, _: Precision, examples: usize) -> AnalyticStep {
        let shape = self.shape;
        let (frames, characters) = (self.longest.frames as u64, self.longest.characters as u64);
        let steps = frames / SUBSAMPLING as u64;
        let (d, ff, heads) = (
            shape.d_model as u64,
            shape.feed_forward as u64,
            shape.heads as u64,
        );
        let layer = |length: u64, keys: u64| 4 * (length * (6 * d + ff) + heads * length * keys);
        let encoder = shape.encoder_layers as u64 * layer(steps, steps);
        let decoder = shape.decoder_layers as u64
            * (layer(characters, characters) + layer(characters, steps));
        let subsampling = 4 * frames * self.mels as u64 * shape.conv_channels as u64 / 2;
        AnalyticStep {
            parameters: 4 * self.parameters(),
            activations: examples as u64 * (encoder + decoder + subsampling),
            data: examples as u64 * 4 * frames * self.mels as u64,
        }
    }
}

impl BuiltIn for AsrConfig {
    fn info(&self) -> ModelInfo {
        ModelInfo {
            name: Self::NAME,
            summary: "speech recogniser: transformer encoder-decoder with a joint CTC head, on \
                      log-mel frames of whole utterances, scored by CER and WER",
            parameters: self.parameters(),
            // Whole utterances: as many frames as each has.
            input: PatchShape {
                mels: self.mels,
                frames: 0,
            },
            default_batch: self.default_batch(),
        }
    }

    fn default_batch(&self) -> DefaultBatch {
        DefaultBatch {
            spectrograms: 8,
            patches: 1,
        }
    }

    fn configure(&self, config: &mut TrainConfig) {
        config.micro_batch = 8;
        config.n_patches = 1;
        config.accumulation = 1;
        config.step_clips = None;
        config.model = ModelSpec::of(self);
    }
}

/// Features for measuring steps: mean 0, variance 1 (four 16-bit uniform draws from one
/// 64-bit word, summed and scaled), from a fast host generator. burn's normal draws (its
/// ChaCha generator, one f64 sample per value) took about 12 ns a value, 9% of a step of 8
/// utterances of 1,200 frames (2026-11-26): time every dry-run, the calibration and
/// `trainer-cli bench` spent on input that is only measured. Each call draws from its own
/// seed, in call order.
fn measuring_features(len: usize) -> Vec<f32> {
    use rand::{RngCore, SeedableRng};
    use std::sync::atomic::{AtomicU64, Ordering};
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(DRAWS.fetch_add(1, Ordering::Relaxed));
    // Each uniform has mean 1/2 and variance 1/12: four sum to mean 2, variance 1/3.
    let scale = 3.0f32.sqrt() / 65_536.0;
    (0..len)
        .map(|_| {
            let word = rng.next_u64();
            let sum: u32 = (0..4).map(|i| ((word >> (16 * i)) & 0xffff) as u32).sum();
            (sum as f32 + 2.0 - 2.0 * 65_536.0) * scale
        })
        .collect()
}

#[cfg(test)]
mod tests;
