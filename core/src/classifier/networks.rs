//! The classifier's networks: one logit per machine from a log-mel patch, by a small vision
//! transformer (the default) or a plain CNN, and the micro-batch they learn from.
//!
//! Vision transformer: the patch cut into 8 x 8 tiles, each tile a token (a linear
//! embedding of its 64 values plus a learned position), a pre-norm transformer encoder,
//! the tokens' mean and a linear layer. The tokens are cut by reshaping, so the embedding is
//! one matrix product rather than a strided convolution. CNN: four 3 x 3 stride-2
//! convolutions (16 channels doubling to 128) with group normalisation and ReLU, the map's
//! mean and a linear layer. Group rather than batch normalisation: each example is
//! normalised alone, so a step split into micro-batches has the whole step's gradient.

use burn::module::{Module, Param};
use burn::nn::PaddingConfig2d;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::transformer::{TransformerEncoder, TransformerEncoderConfig};
use burn::nn::{GroupNorm, GroupNormConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Distribution, Int, Tensor};
use serde::{Deserialize, Serialize};

use crate::gan::networks::Generator;
use crate::model::asr::transformer::{self, LAYER_NORM_EPSILON};
use crate::model::{LayerForms, PatchShape, layers};

/// A tile's side, in mel bands and frames.
pub const TILE: usize = 8;
/// The vision transformer's sizes.
const VIT_WIDTH: usize = 64;
const VIT_HEADS: usize = 4;
const VIT_LAYERS: usize = 4;
const VIT_FEED_FORWARD: usize = 128;
/// The CNN's channels, layer by layer.
const CNN_CHANNELS: [usize; 4] = [16, 32, 64, 128];

/// Which network classifies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClassifierArch {
    /// A small vision transformer over the patch's tiles.
    #[default]
    Vit,
    /// A plain CNN.
    Cnn,
}

impl ClassifierArch {
    pub fn name(self) -> &'static str {
        match self {
            ClassifierArch::Vit => "vit",
            ClassifierArch::Cnn => "cnn",
        }
    }

    /// Trainable values for `classes` classes on patches of `patch`, as PyTorch counts them.
    pub fn parameters(self, patch: PatchShape, classes: usize) -> u64 {
        let classes = classes.max(1);
        let values = match self {
            ClassifierArch::Vit => {
                let (d, ff) = (VIT_WIDTH, VIT_FEED_FORWARD);
                let embed = TILE * TILE * d + d + tokens(patch) * d;
                // Attention's four projections, the feed-forward's two layers, two norms.
                let layer = 4 * (d * d + d) + (d * ff + ff) + (ff * d + d) + 4 * d;
                embed + VIT_LAYERS * layer + 2 * d + d * classes + classes
            }
            ClassifierArch::Cnn => {
                let mut inputs = 1;
                let mut total = 0;
                for outputs in CNN_CHANNELS {
                    total += inputs * outputs * 9 + outputs + 2 * outputs;
                    inputs = outputs;
                }
                total + inputs * classes + classes
            }
        };
        values as u64
    }

    /// Values the network keeps for backward per example, roughly: the analytic account
    /// beside calibration's measurements.
    pub fn activations_per_example(self, patch: PatchShape) -> u64 {
        let values = match self {
            // Per layer: the norms' outputs, the four projections, the scores and weights
            // of each head, the feed-forward's two layers.
            ClassifierArch::Vit => {
                let t = tokens(patch);
                let d = VIT_WIDTH;
                VIT_LAYERS * (6 * t * d + 2 * VIT_HEADS * t * t + 2 * t * VIT_FEED_FORWARD)
                    + 2 * t * d
            }
            // Per layer: the convolution's output, its normalised copy, the ReLU's.
            ClassifierArch::Cnn => {
                let (mut mels, mut frames) = (patch.mels, patch.frames);
                let mut total = 0;
                for channels in CNN_CHANNELS {
                    mels = mels.div_ceil(2);
                    frames = frames.div_ceil(2);
                    total += 3 * channels * mels * frames;
                }
                total
            }
        };
        values as u64
    }
}

/// Tiles of a patch: its whole tiles in each direction (a remainder is left out).
fn tiles(patch: PatchShape) -> [usize; 2] {
    [(patch.mels / TILE).max(1), (patch.frames / TILE).max(1)]
}

fn tokens(patch: PatchShape) -> usize {
    let [m, f] = tiles(patch);
    m * f
}

/// A classifier of either kind.
// A run holds one or two of these: the variants' size difference costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Classifier {
    Vit(SpecVit),
    Cnn(PlainCnn),
}

impl Classifier {
    pub fn new(arch: ClassifierArch, patch: PatchShape, classes: usize, device: &Device) -> Self {
        match arch {
            ClassifierArch::Vit => Classifier::Vit(SpecVit::new(patch, classes, device)),
            ClassifierArch::Cnn => Classifier::Cnn(PlainCnn::new(classes, device)),
        }
    }

    /// One logit per class, `[n, classes]`, of patches `[n, 1, mels, frames]`.
    pub fn logits(&self, patches: Tensor<4>) -> Tensor<2> {
        match self {
            Classifier::Vit(vit) => vit.logits(patches),
            Classifier::Cnn(cnn) => cnn.logits(patches),
        }
    }

    /// Cross-entropy of `classes`, the mean over the micro-batch.
    pub fn loss(&self, patches: Tensor<4>, classes: Tensor<1, Int>) -> Tensor<1> {
        let n = classes.dims()[0];
        let log_p = log_softmax(self.logits(patches), 1);
        log_p.gather(1, classes.reshape([n, 1])).mean().neg()
    }
}

/// The vision transformer.
#[derive(Module, Debug)]
pub struct SpecVit {
    embed: Linear,
    /// `[1, tokens, width]`.
    positions: Param<Tensor<3>>,
    encoder: TransformerEncoder,
    norm: LayerNorm,
    head: Linear,
    tiles: [usize; 2],
}

impl SpecVit {
    fn new(patch: PatchShape, classes: usize, device: &Device) -> Self {
        let d = VIT_WIDTH;
        Self {
            embed: LinearConfig::new(TILE * TILE, d).init(device),
            positions: Param::from_tensor(Tensor::random(
                [1, tokens(patch), d],
                Distribution::Normal(0.0, 0.02),
                device,
            )),
            // Pre-norm and no dropout: the form the recogniser's host attention runs, and a
            // step that draws nothing on the device, so that a resumed run is exact.
            encoder: TransformerEncoderConfig::new(d, VIT_FEED_FORWARD, VIT_HEADS, VIT_LAYERS)
                .with_norm_first(true)
                .with_dropout(0.0)
                .with_layer_norm_eps(LAYER_NORM_EPSILON)
                .init(device),
            norm: LayerNormConfig::new(d)
                .with_epsilon(LAYER_NORM_EPSILON)
                .init(device),
            head: LinearConfig::new(d, classes.max(1)).init(device),
            tiles: tiles(patch),
        }
    }

    fn logits(&self, patches: Tensor<4>) -> Tensor<2> {
        let n = patches.dims()[0];
        let [tm, tf] = self.tiles;
        let tokens = tm * tf;
        let patches = patches.slice([0..n, 0..1, 0..tm * TILE, 0..tf * TILE]);
        let tiled = patches
            .reshape([n, tm, TILE, tf, TILE])
            .swap_dims(2, 3)
            .reshape([n, tokens, TILE * TILE]);
        let x = transformer::project(&self.embed, tiled) + self.positions.val();
        let x = transformer::encode(&self.encoder, x, &vec![tokens; n]);
        let x = transformer::normalise(&self.norm, x);
        let pooled = x.mean_dim(1).reshape([n, VIT_WIDTH]);
        self.head.forward(pooled)
    }
}

/// The plain CNN.
#[derive(Module, Debug)]
pub struct PlainCnn {
    convs: Vec<Conv2d>,
    norms: Vec<GroupNorm>,
    head: Linear,
}

impl PlainCnn {
    fn new(classes: usize, device: &Device) -> Self {
        let mut inputs = 1;
        let (mut convs, mut norms) = (Vec::new(), Vec::new());
        for outputs in CNN_CHANNELS {
            convs.push(
                Conv2dConfig::new([inputs, outputs], [3, 3])
                    .with_stride([2, 2])
                    .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                    .init(device),
            );
            norms.push(GroupNormConfig::new(8, outputs).init(device));
            inputs = outputs;
        }
        Self {
            convs,
            norms,
            head: LinearConfig::new(inputs, classes.max(1)).init(device),
        }
    }

    fn logits(&self, patches: Tensor<4>) -> Tensor<2> {
        let mut x = patches;
        for (conv, norm) in self.convs.iter().zip(&self.norms) {
            // On the CPU Headroom's convolution kernels (their weight gradient one GEMM per
            // sample, where burn's is a convolution of 9 rows), then the norm and ReLU as
            // one op on flex; on cubecl devices the output-only layer of matrix products.
            let y = layers::conv(conv, x, None, LayerForms::Auto, false);
            x = layers::group_norm_relu(norm, y);
        }
        let [n, c, _, _] = x.dims();
        self.head.forward(x.mean_dim(3).mean_dim(2).reshape([n, c]))
    }
}

/// A micro-batch: real patches with their classes and, where generated patches are mixed
/// in, what they are drawn from.
#[derive(Debug, Clone)]
pub struct ClassifierBatch {
    /// `[n, 1, mels, frames]`.
    pub real: Tensor<4>,
    /// `[n]`: each patch's class.
    pub classes: Tensor<1, Int>,
    pub generated: Option<GeneratedDraw>,
}

/// Per example of a micro-batch: the noise its generated patch is drawn from, and whether
/// the real patch is replaced by it (one row each, so that a step's draws are the same
/// however it is cut).
#[derive(Debug, Clone)]
pub struct GeneratedDraw {
    /// `[n, latent]`.
    pub noise: Tensor<2>,
    /// `[n]`: 1 where the example is the generated patch, 0 where it is the real one.
    pub replaced: Tensor<1>,
}

/// What a classifier run trains: the classifier on real patches and, with a generator, a
/// second one on real patches with generated ones mixed in, the generator frozen beside
/// them.
#[derive(Module, Debug)]
pub struct ClassifierNetworks {
    pub real: Classifier,
    pub mixed: Option<Classifier>,
    pub generator: Option<Generator>,
}

/// How the generator's patches (normalised as its GAN run normalised) become the
/// classifier's (normalised as this run normalises): `x * scale + shift`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Renormalise {
    pub scale: f64,
    pub shift: f64,
}

impl ClassifierNetworks {
    /// The mixed classifier's cross-entropy on the batch with generated patches in the
    /// rows drawn for them (the real patches alone where the batch draws none); the
    /// frozen generator runs untracked, keeping nothing for backward.
    pub fn mixed_loss(
        &self,
        mixed: &Classifier,
        batch: ClassifierBatch,
        renormalise: Renormalise,
    ) -> Tensor<1> {
        let (Some(generator), Some(draw)) = (&self.generator, batch.generated) else {
            return mixed.loss(batch.real, batch.classes);
        };
        let n = batch.classes.dims()[0];
        // Untracked parameters: a tracked generator no backward ever reaches would leave
        // its forward's graph in autodiff's memory at every step.
        let made = generator
            .clone()
            .no_grad()
            .forward(draw.noise, batch.classes.clone())
            .detach()
            .mul_scalar(renormalise.scale)
            .add_scalar(renormalise.shift);
        let replaced = draw.replaced.reshape([n, 1, 1, 1]);
        let kept = replaced.clone().neg().add_scalar(1.0);
        let input = batch.real * kept + made * replaced;
        mixed.loss(input, batch.classes)
    }
}
