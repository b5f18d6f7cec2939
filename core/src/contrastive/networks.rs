//! The two towers of the contrastive model and the space they share.
//!
//! Audio: the recogniser's encoder ([`AsrNetworks::encode`]: two stride-2 convolutions,
//! a projection, positions, a pre-norm transformer encoder; built with no decoder layers,
//! its CTC head, token embedding and output layer take no part), the mean over each
//! utterance's own encoder frames, a linear projection. Text: a character embedding,
//! positions, a pre-norm transformer encoder, the mean over the transcript's own
//! characters, a linear projection. Both projections are scaled to unit length; a learned
//! scale (CLIP's temperature, as its logarithm) multiplies their dot products.

use burn::module::{Module, Param};
use burn::nn::transformer::{TransformerEncoder, TransformerEncoderConfig};
use burn::nn::{
    Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig,
    PositionalEncoding, PositionalEncodingConfig,
};
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::retrieval::unit;
use crate::model::asr::transformer::{self, LAYER_NORM_EPSILON};
use crate::model::asr::{AsrNetworks, AsrShape, Utterances};

/// Longest transcript the text positions cover, in characters.
const MAX_CHARACTERS: usize = 2_000;
/// CLIP's starting temperature, 0.07, as the logarithm of the scale 1 / 0.07.
pub const START_LOG_SCALE: f32 = 2.659_26;
/// CLIP's cap on the scale, 100, as its logarithm: a larger scale makes the loss unstable.
const MAX_LOG_SCALE: f64 = 4.605_17;

/// Both towers and the scale: what the optimizer steps and a checkpoint saves.
#[derive(Module, Debug)]
pub struct PairNetworks {
    audio: AsrNetworks,
    audio_head: Linear,
    text_embedding: Embedding,
    text_positions: PositionalEncoding,
    text_encoder: TransformerEncoder,
    text_norm: LayerNorm,
    text_head: Linear,
    /// `[1]`: the logarithm of the logits' scale.
    pub log_scale: Param<Tensor<1>>,
}

impl PairNetworks {
    /// Towers of `shape` (the audio encoder's and the text encoder's widths, heads and
    /// feed-forward; `text_layers` text layers) over `mels` bands and `tokens` characters,
    /// projected to `width`.
    pub fn new(
        shape: AsrShape,
        text_layers: usize,
        mels: usize,
        tokens: usize,
        width: usize,
        device: &Device,
    ) -> Self {
        let d = shape.d_model;
        Self {
            audio: AsrNetworks::new(shape, mels, tokens, device),
            audio_head: LinearConfig::new(d, width).init(device),
            text_embedding: EmbeddingConfig::new(tokens, d).init(device),
            text_positions: PositionalEncodingConfig::new(d)
                .with_max_sequence_size(MAX_CHARACTERS)
                .init(device),
            text_encoder: TransformerEncoderConfig::new(
                d,
                shape.feed_forward,
                shape.heads,
                text_layers,
            )
            .with_norm_first(true)
            .with_dropout(0.0)
            .with_layer_norm_eps(LAYER_NORM_EPSILON)
            .init(device),
            text_norm: LayerNormConfig::new(d)
                .with_epsilon(LAYER_NORM_EPSILON)
                .init(device),
            text_head: LinearConfig::new(d, width).init(device),
            log_scale: Param::from_tensor(Tensor::from_data(
                TensorData::new(vec![START_LOG_SCALE], [1]),
                device,
            )),
        }
    }

    /// Each pair's audio and text embeddings side by side, `[n, 2 x width]`, each of unit
    /// length.
    pub fn embed(&self, batch: Utterances) -> Tensor<2> {
        let device = batch.features.device();
        let (encoded, frames) = self.audio.encode(batch.features, &batch.frames);
        let audio = self.audio_head.forward(masked_mean(encoded, &frames));
        let characters: Vec<usize> = batch.tokens.iter().map(|t| t.len().max(1)).collect();
        let longest = characters.iter().copied().max().unwrap_or(1);
        let n = batch.tokens.len();
        let mut ids = vec![0i64; n * longest];
        for (row, tokens) in batch.tokens.iter().enumerate() {
            for (i, &t) in tokens.iter().enumerate() {
                ids[row * longest + i] = t as i64;
            }
        }
        let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [n, longest]), &device);
        let x = self
            .text_positions
            .forward(self.text_embedding.forward(ids));
        let x = transformer::encode(&self.text_encoder, x, &characters);
        let x = transformer::normalise(&self.text_norm, x);
        let text = self.text_head.forward(masked_mean(x, &characters));
        Tensor::cat(vec![unit(audio), unit(text)], 1)
    }

    /// The scale's logarithm, capped as CLIP caps it.
    pub fn log_scale(&self) -> Tensor<1> {
        self.log_scale.val().clamp_max(MAX_LOG_SCALE)
    }
}

/// The mean of each row's first `lengths[i]` steps, `[n, d]` from `[n, steps, d]`.
fn masked_mean(x: Tensor<3>, lengths: &[usize]) -> Tensor<2> {
    let [n, steps, d] = x.dims();
    let device = x.device();
    let mut mask = vec![0.0f32; n * steps];
    for (row, &length) in lengths.iter().enumerate() {
        let length = length.clamp(1, steps);
        for value in &mut mask[row * steps..row * steps + length] {
            *value = 1.0 / length as f32;
        }
    }
    let mask = Tensor::<3>::from_data(TensorData::new(mask, [n, steps, 1]), &device);
    (x * mask).sum_dim(1).reshape([n, d])
}
