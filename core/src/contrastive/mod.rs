//! `speech-clap`: a contrastive model of utterances and their transcripts (seed
//! 003's kind of training), CLAP-style: an audio tower over log-mel frames and a text tower
//! over characters, projected to one space, trained with the symmetric InfoNCE loss and a
//! learned temperature ([`retrieval`]), measured by retrieval recall both ways.
//!
//! Every other pair of a step is a negative, so the loss couples the step's examples
//! ([`Coupling::Embeddings`]): a step the planner splits into micro-batches is computed by
//! gradient caching (`crate::step::cached`) and has the whole step's gradient, every pair
//! seeing every other pair of the step as a negative, whatever the micro-batch. The data are
//! the speech recogniser's (its built-in corpus, by length), opened through its task.

pub mod networks;
pub mod retrieval;
mod run_task;
#[cfg(test)]
mod tests;

use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::config::{RunLength, TrainConfig};
use crate::model::asr::{AsrShape, Utterances};
use crate::model::{AnalyticStep, DefaultBatch, ModelInfo, ModelSpec, NamedConfig, StepLoss};
use crate::precision::Precision;
use crate::speech::AsrConfig;
use crate::task::{Coupling, StepContext, TrainingTask};
use crate::train::BuiltIn;

pub use networks::PairNetworks;

/// Which pairs are each pair's negatives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Negatives {
    /// Every other pair of the optimizer step, whatever the micro-batch (gradient caching).
    #[default]
    Step,
    /// Only the other pairs of the pair's micro-batch: plain accumulation of each
    /// micro-batch's loss, as seed 003 trained at batch 16 x 8. Another loss than the
    /// step's: each pair sees micro-batch - 1 negatives.
    MicroBatch,
}

/// A contrastive run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContrastiveConfig {
    /// The utterances' corpus, features, vocabulary and longest utterance, as the
    /// recogniser reads them; its shape is the audio encoder's (and the text encoder's
    /// width, heads and feed-forward).
    pub speech: AsrConfig,
    /// Layers of the text encoder.
    pub text_layers: usize,
    /// The shared space's width.
    pub width: usize,
    #[serde(default)]
    pub negatives: Negatives,
}

impl Default for ContrastiveConfig {
    fn default() -> Self {
        Self {
            speech: AsrConfig {
                shape: AsrShape {
                    decoder_layers: 0,
                    ..AsrShape::TINY
                },
                ..AsrConfig::default()
            },
            text_layers: 2,
            width: 64,
            negatives: Negatives::Step,
        }
    }
}

impl NamedConfig for ContrastiveConfig {
    const NAME: &'static str = "speech-clap";
}

impl ContrastiveConfig {
    /// The symmetric InfoNCE loss of pairs' embeddings (audio, then text, side by side).
    fn info_nce(&self, networks: &PairNetworks, embeddings: Tensor<2>) -> StepLoss {
        let w = self.width;
        let audio = embeddings.clone().narrow(1, 0, w);
        let text = embeddings.narrow(1, w, w);
        let total = retrieval::info_nce(audio, text, networks.log_scale());
        StepLoss {
            reported: total.clone(),
            total,
        }
    }

    fn tokens(&self) -> usize {
        self.speech.tokens()
    }

    /// Trainable values of the text tower, both projections and the scale.
    fn beside_audio(&self) -> u64 {
        let shape = self.speech.shape;
        let (d, ff, w) = (
            shape.d_model as u64,
            shape.feed_forward as u64,
            self.width as u64,
        );
        let linear = |i: u64, o: u64| i * o + o;
        let layer = 4 * linear(d, d) + linear(d, ff) + linear(ff, d) + 2 * 2 * d;
        let text = self.tokens() as u64 * d + self.text_layers as u64 * layer + 2 * d;
        text + 2 * linear(d, w) + 1
    }
}

impl TrainingTask for ContrastiveConfig {
    type Networks = PairNetworks;
    type Batch = Utterances;

    fn phases(&self) -> &'static [&'static str] {
        &["pairs"]
    }

    fn coupling(&self) -> Coupling {
        match self.negatives {
            Negatives::Step => Coupling::Embeddings,
            // Each micro-batch's loss alone, accumulated: what plain accumulation does.
            Negatives::MicroBatch => Coupling::PerExample,
        }
    }

    fn cut_into_patches(&self) -> bool {
        false
    }

    /// f32 throughout: the towers do not compute in half precision yet.
    fn mixed_precision(&self) -> bool {
        false
    }

    fn networks(&self, device: &Device) -> PairNetworks {
        PairNetworks::new(
            self.speech.shape,
            self.text_layers,
            self.speech.mels,
            self.tokens(),
            self.width,
            device,
        )
    }

    fn examples_in(&self, batch: &Utterances) -> usize {
        batch.len()
    }

    fn measuring_batch(&self, examples: usize, device: &Device) -> Utterances {
        self.speech.measuring_batch(examples, device)
    }

    fn at_length(&self, frames: usize) -> Option<Self> {
        Some(Self {
            speech: self.speech.at_length(frames)?,
            ..self.clone()
        })
    }

    fn embed(
        &self,
        networks: &PairNetworks,
        _: usize,
        batch: Utterances,
        _: StepContext,
    ) -> Option<Tensor<2>> {
        Some(networks.embed(batch))
    }

    fn loss_of_embeddings(
        &self,
        networks: &PairNetworks,
        _: usize,
        embeddings: Tensor<2>,
    ) -> Option<StepLoss> {
        Some(self.info_nce(networks, embeddings))
    }

    /// One micro-batch of the whole step: the loss over its own embeddings.
    fn loss(
        &self,
        networks: &PairNetworks,
        _: usize,
        batch: Utterances,
        _: StepContext,
    ) -> StepLoss {
        self.info_nce(networks, networks.embed(batch))
    }

    fn parameters(&self) -> u64 {
        self.speech.parameters() + self.beside_audio()
    }

    /// Both embeddings of every pair and their gradients (f32), and the loss's scores of
    /// every pair against every other: the scores, each way's log-softmax and their
    /// gradients, six `n x n` matrices.
    fn cache_bytes(&self, step_examples: usize) -> u64 {
        if self.negatives != Negatives::Step {
            return 0;
        }
        let n = step_examples as u64;
        4 * (2 * n * 2 * self.width as u64 + 6 * n * n)
    }

    /// The audio encoder's account (the larger part), the text tower's weights beside it,
    /// and the step's cache: both embeddings of every pair and their gradients.
    fn step_memory(
        &self,
        backend: BackendKind,
        precision: Precision,
        examples: usize,
    ) -> AnalyticStep {
        let audio = self.speech.step_memory(backend, precision, examples);
        AnalyticStep {
            parameters: 4 * self.parameters(),
            activations: audio.activations,
            data: audio.data + 4 * examples as u64 * 2 * 2 * self.width as u64,
        }
    }
}

impl BuiltIn for ContrastiveConfig {
    fn info(&self) -> ModelInfo {
        ModelInfo {
            name: Self::NAME,
            summary: "contrastive audio-text model (CLAP-style) of utterances and their \
                      transcripts: symmetric InfoNCE over every pair of a step, exact at any \
                      micro-batch by gradient caching; retrieval recall both ways",
            parameters: self.parameters(),
            input: crate::model::PatchShape {
                mels: self.speech.mels,
                frames: 0,
            },
            default_batch: self.default_batch(),
        }
    }

    /// 64 pairs a step: each pair sees 63 negatives.
    fn default_batch(&self) -> DefaultBatch {
        DefaultBatch {
            spectrograms: 64,
            patches: 1,
        }
    }

    fn configure(&self, config: &mut TrainConfig) {
        config.micro_batch = self.default_batch().spectrograms;
        config.n_patches = 1;
        config.accumulation = 1;
        config.step_clips = None;
        config.phase_micro_batches.clear();
        config.lr = 1e-3;
        config.length = RunLength::Steps(300);
        config.validate_every = 100;
        config.model = ModelSpec::of(self);
    }
}
