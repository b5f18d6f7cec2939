//! The recogniser's networks and its joint CTC/attention loss.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CTCLossConfig;
use burn::nn::transformer::{
    TransformerDecoder, TransformerDecoderConfig, TransformerEncoder, TransformerEncoderConfig,
};
use burn::nn::{
    Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig,
    PositionalEncoding, PositionalEncodingConfig,
};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::AsrShape;
use super::transformer::{self, LAYER_NORM_EPSILON};
use crate::model::{LayerForms, cpu_forms, layers};
use headroom_datasets::speech::vocab::Vocabulary;

/// Longest sequence the positional encodings cover, in encoder frames or characters:
/// 40,000 input frames (400 s at a 10 ms hop) after subsampling.
const MAX_POSITIONS: usize = 10_000;

/// No dropout: its masks come from the device's generator, which a resumed run does not
/// restore, so a resumed run would not be the uninterrupted one (ESPnet uses 0.1; drawing
/// the masks from the seed and the step would allow it).
const DROPOUT: f64 = 0.0;

/// A micro-batch of utterances: log-mel frames padded to the longest, and each one's
/// transcript as tokens.
#[derive(Debug, Clone)]
pub struct Utterances {
    /// `[n, frames, mels]`, zero past each utterance's own frames.
    pub features: Tensor<3>,
    /// Each utterance's frames.
    pub frames: Vec<usize>,
    /// Each utterance's transcript as vocabulary tokens (no special token).
    pub tokens: Vec<Vec<usize>>,
}

impl Utterances {
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}

/// `features` `[n, frames, mels]` padded with silence to the fewest frames the subsampling
/// makes an encoder frame of: a micro-batch of clips under 70 ms (or the planner's
/// shortest calibration step) would otherwise ask the convolutions for a negative length.
fn padded_to_subsample(features: Tensor<3>) -> Tensor<3> {
    let [n, length, mels] = features.dims();
    let missing = AsrShape::MIN_SUBSAMPLED.saturating_sub(length);
    if missing == 0 {
        return features;
    }
    let silence = Tensor::zeros([n, missing, mels], &features.device());
    Tensor::cat(vec![features, silence], 1)
}

/// The encoder, the CTC head and the attention decoder, as one module.
#[derive(Module, Debug)]
pub struct AsrNetworks {
    conv1: Conv2d,
    conv2: Conv2d,
    project: Linear,
    positions: PositionalEncoding,
    encoder: TransformerEncoder,
    encoder_norm: LayerNorm,
    ctc_head: Linear,
    embedding: Embedding,
    decoder: TransformerDecoder,
    decoder_norm: LayerNorm,
    output: Linear,
}

/// What the loss is made of, each a mean over the micro-batch's utterances of the
/// utterance's whole loss (summed over its frames' alignments, or its tokens), as ESPnet
/// normalises by the batch: so a step's loss is the mean over its utterances whatever its
/// micro-batches, and accumulating them gives the whole step's gradient exactly.
pub struct AsrLoss {
    /// `ctc_weight` x CTC + (1 - `ctc_weight`) x the decoder's cross-entropy.
    pub total: Tensor<1>,
    /// The CTC loss alone.
    pub ctc: Tensor<1>,
}

impl AsrNetworks {
    pub fn new(shape: AsrShape, mels: usize, vocabulary: usize, device: &Device) -> Self {
        let (d, c) = (shape.d_model, shape.conv_channels);
        let conv = |channels| Conv2dConfig::new(channels, [3, 3]).with_stride([2, 2]);
        Self {
            conv1: conv([1, c]).init(device),
            conv2: conv([c, c]).init(device),
            project: LinearConfig::new(c * AsrShape::subsampled(mels), d).init(device),
            positions: PositionalEncodingConfig::new(d)
                .with_max_sequence_size(MAX_POSITIONS)
                .init(device),
            encoder: TransformerEncoderConfig::new(
                d,
                shape.feed_forward,
                shape.heads,
                shape.encoder_layers,
            )
            .with_norm_first(true)
            .with_dropout(DROPOUT)
            .with_layer_norm_eps(LAYER_NORM_EPSILON)
            .init(device),
            encoder_norm: LayerNormConfig::new(d)
                .with_epsilon(LAYER_NORM_EPSILON)
                .init(device),
            ctc_head: LinearConfig::new(d, vocabulary).init(device),
            embedding: EmbeddingConfig::new(vocabulary, d).init(device),
            decoder: TransformerDecoderConfig::new(
                d,
                shape.feed_forward,
                shape.heads,
                shape.decoder_layers,
            )
            .with_norm_first(true)
            .with_dropout(DROPOUT)
            .with_layer_norm_eps(LAYER_NORM_EPSILON)
            .init(device),
            decoder_norm: LayerNormConfig::new(d)
                .with_epsilon(LAYER_NORM_EPSILON)
                .init(device),
            output: LinearConfig::new(d, vocabulary).init(device),
        }
    }

    /// The encoder's output `[n, frames / 4, d_model]` and each utterance's encoder frames.
    pub fn encode(&self, features: Tensor<3>, frames: &[usize]) -> (Tensor<3>, Vec<usize>) {
        let features = padded_to_subsample(features);
        let [_, length, mels] = features.dims();
        let rows = if cpu_forms::is_cpu(&features.device()) {
            usize::MAX
        } else {
            subsampling_rows(length, mels, self.conv1.weight.val().dims()[0])
        };
        let x = self.positions.forward(self.subsample(features, rows));
        let steps = x.dims()[1];
        let lengths: Vec<usize> = frames
            .iter()
            .map(|&f| AsrShape::subsampled(f).clamp(1, steps))
            .collect();
        let encoded = transformer::encode(&self.encoder, x, &lengths);
        (transformer::normalise(&self.encoder_norm, encoded), lengths)
    }

    /// The two convolutions and the projection to `d_model`, `rows` utterances at a time:
    /// `[n, frames / 4, d_model]`.
    pub fn subsample(&self, features: Tensor<3>, rows: usize) -> Tensor<3> {
        let [n, length, mels] = features.dims();
        if rows >= n {
            return self.subsample_all(features);
        }
        let rows = rows.max(1);
        let parts = (0..n)
            .step_by(rows)
            .map(|start| {
                let part =
                    features
                        .clone()
                        .slice([start..(start + rows).min(n), 0..length, 0..mels]);
                self.subsample_all(part)
            })
            .collect();
        Tensor::cat(parts, 0)
    }

    fn subsample_all(&self, features: Tensor<3>) -> Tensor<3> {
        let [n, length, mels] = features.dims();
        let x = features.reshape([n, 1, length, mels]);
        // On the CPU through Headroom's forms (the first convolution, of one channel, by
        // flex's plane kernels, elsewhere by unfolding; the second by flex's
        // unfolded-gradient kernels; bias and ReLU fused):
        // burn's weight gradients here are matrix products a few rows wide. On cubecl
        // devices the output-only layers (the second as matrix products, `gpu_layers`).
        let conv =
            |layer: &Conv2d, x: Tensor<4>| layers::conv(layer, x, None, LayerForms::Auto, true);
        let x = conv(&self.conv2, conv(&self.conv1, x));
        let [_, channels, steps, bands] = x.dims();
        let x = x.swap_dims(1, 2).reshape([n, steps, channels * bands]);
        transformer::project(&self.project, x)
    }

    /// Each utterance's most likely CTC token per encoder frame of the encoder's output,
    /// `[n, frames]` (token indices as floats, for reading back).
    pub fn ctc_best_path(&self, encoded: Tensor<3>) -> Tensor<2> {
        let [n, steps, _] = encoded.dims();
        transformer::project(&self.ctc_head, encoded)
            .argmax(2)
            .reshape([n, steps])
            .float()
    }

    /// The decoder's most likely token after each row of `prefixes` (rows of one length,
    /// each starting with the start token), reading the encoder's output `memory`; `[n]`,
    /// token indices as floats for reading back.
    pub fn next_tokens(
        &self,
        prefixes: &[Vec<usize>],
        memory: Tensor<3>,
        memory_lengths: &[usize],
    ) -> Tensor<1> {
        let device = memory.device();
        let n = prefixes.len();
        let steps = prefixes.first().map_or(1, Vec::len);
        let logits = self.decode(
            int_rows(prefixes, steps, 0, &device),
            &vec![steps; n],
            memory,
            memory_lengths,
        );
        let [_, _, vocabulary] = logits.dims();
        logits
            .slice([0..n, steps - 1..steps, 0..vocabulary])
            .argmax(2)
            .reshape([n])
            .float()
    }

    /// CTC's log-probabilities per encoder frame, `[n, frames, vocabulary]`.
    pub fn ctc_log_probs(&self, encoded: Tensor<3>) -> Tensor<3> {
        log_softmax(transformer::project(&self.ctc_head, encoded), 2)
    }

    /// The joint loss of a micro-batch (`boundary`: the start/end token).
    pub fn loss(&self, batch: Utterances, ctc_weight: f64, boundary: usize) -> AsrLoss {
        let device = batch.features.device();
        let n = batch.len();
        let (encoded, lengths) = self.encode(batch.features, &batch.frames);
        let longest = batch.tokens.iter().map(Vec::len).max().unwrap_or(0).max(1);

        // CTC over the encoder's frames: on flex by the host recursions (`cpu_kernels::ctc`),
        // elsewhere by burn's (a kernel of its own on GPUs).
        let log_probs = self.ctc_log_probs(encoded.clone());
        let ctc = match host_ctc(&log_probs, &batch.tokens, &lengths) {
            Some(ctc) => ctc,
            None => CTCLossConfig::new()
                .with_blank(Vocabulary::BLANK)
                .with_zero_infinity(true)
                .init()
                .forward(
                    log_probs.swap_dims(0, 1),
                    int_rows(&batch.tokens, longest, boundary, &device),
                    int_row(&lengths, &device),
                    int_row(
                        &batch.tokens.iter().map(Vec::len).collect::<Vec<_>>(),
                        &device,
                    ),
                ),
        };
        let ctc = ctc.mean();

        // The decoder reads <boundary> y1 .. yk and predicts y1 .. yk <boundary>.
        let steps_out = longest + 1;
        let inputs: Vec<Vec<usize>> = batch
            .tokens
            .iter()
            .map(|t| std::iter::once(boundary).chain(t.iter().copied()).collect())
            .collect();
        let outputs: Vec<Vec<usize>> = batch
            .tokens
            .iter()
            .map(|t| t.iter().copied().chain(std::iter::once(boundary)).collect())
            .collect();
        let decoded = self.decode(
            int_rows(&inputs, steps_out, boundary, &device),
            &inputs.iter().map(Vec::len).collect::<Vec<_>>(),
            encoded,
            &lengths,
        );
        let log_p = log_softmax(decoded, 2);
        let targets = int_rows(&outputs, steps_out, boundary, &device).reshape([n, steps_out, 1]);
        let picked = log_p.gather(2, targets).reshape([n, steps_out]);
        let counted: Vec<f32> = outputs
            .iter()
            .flat_map(|o| (0..steps_out).map(move |i| if i < o.len() { 1.0 } else { 0.0 }))
            .collect();
        let weights = Tensor::from_data(TensorData::new(counted, [n, steps_out]), &device);
        let attention = (picked * weights).sum().neg().div_scalar(n as f32);

        let total = ctc.clone().mul_scalar(ctc_weight) + attention.mul_scalar(1.0 - ctc_weight);
        AsrLoss {
            total: total.reshape([1]),
            ctc: ctc.reshape([1]),
        }
    }

    /// The decoder's logits `[n, tokens, vocabulary]` for `tokens` (each row's own length in
    /// `lengths`) given the encoder's output.
    fn decode(
        &self,
        tokens: Tensor<2, Int>,
        lengths: &[usize],
        memory: Tensor<3>,
        memory_lengths: &[usize],
    ) -> Tensor<3> {
        let x = self.positions.forward(self.embedding.forward(tokens));
        let decoded = transformer::decode(&self.decoder, x, lengths, memory, memory_lengths);
        transformer::project(
            &self.output,
            transformer::normalise(&self.decoder_norm, decoded),
        )
    }
}

/// Each utterance's CTC loss by Headroom's host recursions, on flex; `None` elsewhere.
#[cfg(feature = "flex")]
fn host_ctc(log_probs: &Tensor<3>, tokens: &[Vec<usize>], frames: &[usize]) -> Option<Tensor<1>> {
    use crate::model::cpu_kernels::{self, ctc::CtcTargets};
    cpu_kernels::runs_on(&log_probs.device()).then(|| {
        cpu_kernels::ctc::loss(
            log_probs.clone(),
            CtcTargets {
                labels: tokens.to_vec(),
                frames: frames.to_vec(),
                blank: Vocabulary::BLANK,
            },
        )
    })
}

#[cfg(not(feature = "flex"))]
fn host_ctc(_: &Tensor<3>, _: &[Vec<usize>], _: &[usize]) -> Option<Tensor<1>> {
    None
}

fn int_row(values: &[usize], device: &Device) -> Tensor<1, Int> {
    let values: Vec<i64> = values.iter().map(|&v| v as i64).collect();
    let n = values.len();
    Tensor::from_data(TensorData::new(values, [n]), device)
}

/// Rows padded to `width` with `pad`.
fn int_rows(rows: &[Vec<usize>], width: usize, pad: usize, device: &Device) -> Tensor<2, Int> {
    let values: Vec<i64> = rows
        .iter()
        .flat_map(|row| (0..width).map(|i| row.get(i).copied().unwrap_or(pad) as i64))
        .collect();
    Tensor::from_data(TensorData::new(values, [rows.len(), width]), device)
}

/// Most utterances the subsampling takes at once on a device pool, from the first
/// convolution's output per utterance. A device pool carves pages sized to its largest
/// allocation, so one convolution over a whole micro-batch (0.7 GiB at 32 x 1,100 frames of
/// the large recogniser) makes pages of a GiB, each 8-12% of a step's footprint, and a run
/// whose pool ends a page fuller than its fresh steps is that far off its plan (H100,
/// 2026-11-27: -10.9%). In parts of at most this much, or of one utterance where one is
/// more, the pages are a few percent of a step whatever the micro-batch (the large
/// recogniser's: 58 MiB, one utterance of 2,947 frames, on an H200, 2026-11-27).
fn subsampling_rows(length: usize, mels: usize, channels: usize) -> usize {
    const PART_BYTES: usize = 32 << 20;
    let once = |n: usize| n.saturating_sub(3) / 2 + 1;
    let per_utterance = channels * once(length) * once(mels) * std::mem::size_of::<f32>();
    (PART_BYTES / per_utterance.max(1)).max(1)
}
