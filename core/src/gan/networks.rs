//! The conditional GAN's two networks on log-mel patches, and the hinge losses of its two
//! phases.
//!
//! Generator: the noise beside its class's learned embedding, a linear layer to a
//! `mels/16 x frames/16` map of `8 x width` channels, four 4 x 4 stride-2 transposed
//! convolutions that halve the channels (the last keeps them), each with group
//! normalisation and ReLU, and a 3 x 3 convolution to one channel, cropped to the patch.
//! Group normalisation rather than batch normalisation: it normalises each example alone, so
//! a step split into micro-batches computes the gradient of the whole step.
//!
//! Discriminator: four 4 x 4 stride-2 convolutions (`width` channels doubling to
//! `8 x width`) with leaky ReLU, summed over the map, then a linear score plus the
//! projection of the features on the class's embedding (Miyato & Koyama's projection
//! discriminator). Every weight of it is spectrally normalised ([`spectral_norm`]).

use burn::module::{Module, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig};
use burn::nn::{GroupNorm, GroupNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::{leaky_relu, relu};
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Distribution, Int, Tensor};

use super::GanShape;
use crate::model::{LayerForms, layers, untracked};

/// Power iterations per spectral norm: enough, from a fixed start, for the largest singular
/// value of these weights to a few percent (see [`spectral_norm`]).
const POWER_ITERATIONS: usize = 4;
/// The discriminator's leaky ReLU's slope below zero.
const LEAKY_SLOPE: f32 = 0.2;
/// Stride-2 layers in each network: a patch's sides are 16 times the generator's first map.
pub const LAYERS: usize = 4;

/// A micro-batch of the GAN: real patches with their classes, and the noise each phase's
/// generated patches are drawn from (one row per example, so that a step's noise is the same
/// however it is cut, and a resumed run draws what the uninterrupted one did).
#[derive(Debug, Clone)]
pub struct GanBatch {
    /// `[n, 1, mels, frames]`.
    pub real: Tensor<4>,
    /// `[n]`: each example's class.
    pub classes: Tensor<1, Int>,
    /// `[n, latent]`: the discriminator phase's generated patches.
    pub discriminator_noise: Tensor<2>,
    /// `[n, latent]`: the generator phase's.
    pub generator_noise: Tensor<2>,
}

/// Both networks: what the optimizer steps and a checkpoint saves.
#[derive(Module, Debug)]
pub struct GanNetworks {
    pub generator: Generator,
    pub discriminator: Discriminator,
}

impl GanNetworks {
    pub fn new(shape: &GanShape, classes: usize, device: &Device) -> Self {
        Self {
            generator: Generator::new(shape, classes, device),
            discriminator: Discriminator::new(shape, classes, device),
        }
    }

    /// The discriminator phase's hinge loss: mean(relu(1 - D(real))) + mean(relu(1 +
    /// D(G(z)))), the generator run untracked (as PyTorch's `no_grad`): the phase steps the
    /// discriminator alone, and nothing of the generator's forward is kept.
    pub fn discriminator_loss(&self, batch: GanBatch) -> Tensor<1> {
        let fake = untracked(&self.generator)
            .forward(batch.discriminator_noise, batch.classes.clone())
            .detach();
        let real = self
            .discriminator
            .forward(batch.real, batch.classes.clone());
        let fake = self.discriminator.forward(fake, batch.classes);
        relu(real.neg().add_scalar(1.0)).mean() + relu(fake.add_scalar(1.0)).mean()
    }

    /// The generator phase's hinge loss, -mean(D(G(z))): backpropagated through the
    /// discriminator, whose gradients the phase leaves unused.
    pub fn generator_loss(&self, batch: GanBatch) -> Tensor<1> {
        let fake = self
            .generator
            .forward(batch.generator_noise, batch.classes.clone());
        self.discriminator.forward(fake, batch.classes).mean().neg()
    }
}

/// A transposed convolution that doubles the map, with group normalisation and ReLU.
#[derive(Module, Debug)]
pub struct Upsample {
    conv: ConvTranspose2d,
    norm: GroupNorm,
}

impl Upsample {
    fn new(inputs: usize, outputs: usize, device: &Device) -> Self {
        Self {
            conv: ConvTranspose2dConfig::new([inputs, outputs], [4, 4])
                .with_stride([2, 2])
                .with_padding([1, 1])
                .init(device),
            norm: GroupNormConfig::new(groups(outputs), outputs).init(device),
        }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        // On the CPU Headroom's transposed convolution (flex's unfolded-gradient kernel, one
        // GEMM per sample each way), on cubecl devices the output-only layer of matrix
        // products (`gpu_layers`); burn's elsewhere.
        let up = layers::up(&self.conv, x, None, LayerForms::Auto, false);
        layers::group_norm_relu(&self.norm, up)
    }
}

/// Groups of at most 8 channels' normalisation: 8 where the channels divide by it.
fn groups(channels: usize) -> usize {
    (1..=8)
        .rev()
        .find(|&g| channels.is_multiple_of(g))
        .unwrap_or(1)
}

#[derive(Module, Debug)]
pub struct Generator {
    /// `[classes, latent]`: each class's embedding, beside the noise.
    embedding: Param<Tensor<2>>,
    project: Linear,
    blocks: Vec<Upsample>,
    out: Conv2d,
    /// The first map's channels and sides, and the patch it is cropped to.
    channels: usize,
    start_mels: usize,
    start_frames: usize,
    mels: usize,
    frames: usize,
}

impl Generator {
    pub fn new(shape: &GanShape, classes: usize, device: &Device) -> Self {
        let [start_mels, start_frames] = shape.start();
        let channels = 8 * shape.width;
        let mut blocks = Vec::with_capacity(LAYERS);
        let mut inputs = channels;
        for layer in 0..LAYERS {
            let outputs = if layer + 1 < LAYERS {
                inputs / 2
            } else {
                inputs
            };
            blocks.push(Upsample::new(inputs, outputs, device));
            inputs = outputs;
        }
        Self {
            embedding: Param::from_tensor(Tensor::random(
                [classes.max(1), shape.latent],
                Distribution::Normal(0.0, 1.0),
                device,
            )),
            project: LinearConfig::new(2 * shape.latent, channels * start_mels * start_frames)
                .init(device),
            blocks,
            out: Conv2dConfig::new([inputs, 1], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device),
            channels,
            start_mels,
            start_frames,
            mels: shape.mels,
            frames: shape.frames,
        }
    }

    /// Patches `[n, 1, mels, frames]` of classes `classes` from noise `[n, latent]`.
    pub fn forward(&self, noise: Tensor<2>, classes: Tensor<1, Int>) -> Tensor<4> {
        let n = noise.dims()[0];
        let embedding = self.embedding.val();
        let embedding = embedding.clone() / spectral_norm(embedding).reshape([1, 1]);
        let embedded = embedding.select(0, classes);
        let x = self.project.forward(Tensor::cat(vec![noise, embedded], 1));
        let mut x = relu(x.reshape([n, self.channels, self.start_mels, self.start_frames]));
        for block in &self.blocks {
            x = block.forward(x);
        }
        // One output channel: on flex its planes, on the other CPU backends every tap's
        // product at once (`conv_by_taps`); on cubecl devices the output-only layer.
        let x = layers::conv(&self.out, x, None, LayerForms::Auto, false);
        if x.dims()[2..] == [self.mels, self.frames] {
            x
        } else {
            x.slice([0..n, 0..1, 0..self.mels, 0..self.frames])
        }
    }
}

/// A convolution whose weight is divided by its largest singular value.
#[derive(Module, Debug)]
pub struct NormalisedConv {
    /// `[outputs, inputs, 4, 4]`.
    weight: Param<Tensor<4>>,
    bias: Param<Tensor<1>>,
}

impl NormalisedConv {
    fn new(inputs: usize, outputs: usize, device: &Device) -> Self {
        // burn's and PyTorch's default: uniform within 1/sqrt(fan-in).
        let bound = 1.0 / ((inputs * 16) as f64).sqrt();
        Self {
            weight: Param::from_tensor(Tensor::random(
                [outputs, inputs, 4, 4],
                Distribution::Uniform(-bound, bound),
                device,
            )),
            bias: Param::from_tensor(Tensor::zeros([outputs], device)),
        }
    }

    /// Halves the map (4 x 4, stride 2, padding 1), then the leaky ReLU.
    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let weight = self.weight.val();
        let [o, i, kh, kw] = weight.dims();
        let sigma = spectral_norm(weight.clone().reshape([o, i * kh * kw]));
        let weight = weight / sigma.reshape([1, 1, 1, 1]);
        // On flex Headroom's convolution kernel with the leaky ReLU in the same op (its
        // weight gradient one GEMM per sample over the positions, where burn's is a
        // convolution with 16 rows); on cubecl devices the output-only layer of matrix
        // products with the leaky ReLU (`gpu_layers`); elsewhere burn's.
        #[cfg(feature = "flex")]
        if crate::model::cpu_kernels::runs_on(&x.device()) {
            let activation = crate::model::cpu_kernels::Activation::Leaky(LEAKY_SLOPE);
            return crate::model::cpu_kernels::conv(x, weight, self.bias.val(), 2, 1, activation);
        }
        let options = ConvOptions::new([2, 2], [1, 1], [1, 1], 1);
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        if crate::model::gpu_layers::runs_on(&x.device()) {
            let bias = self.bias.val();
            return crate::model::gpu_layers::conv_leaky(x, weight, bias, options, LEAKY_SLOPE);
        }
        let y = conv2d(x, weight, Some(self.bias.val()), options);
        leaky_relu(y, LEAKY_SLOPE.into())
    }
}

#[derive(Module, Debug)]
pub struct Discriminator {
    blocks: Vec<NormalisedConv>,
    /// `[1, features]` and its bias: the class-free score.
    score: Param<Tensor<2>>,
    score_bias: Param<Tensor<1>>,
    /// `[classes, features]`: the projection's class embeddings (spectrally normalised as
    /// the other weights, or the score could grow through them unbounded).
    embedding: Param<Tensor<2>>,
}

impl Discriminator {
    fn new(shape: &GanShape, classes: usize, device: &Device) -> Self {
        let mut blocks = Vec::with_capacity(LAYERS);
        let mut inputs = 1;
        let mut outputs = shape.width;
        for _ in 0..LAYERS {
            blocks.push(NormalisedConv::new(inputs, outputs, device));
            inputs = outputs;
            outputs *= 2;
        }
        let bound = 1.0 / (inputs as f64).sqrt();
        Self {
            blocks,
            score: Param::from_tensor(Tensor::random(
                [1, inputs],
                Distribution::Uniform(-bound, bound),
                device,
            )),
            score_bias: Param::from_tensor(Tensor::zeros([1], device)),
            embedding: Param::from_tensor(Tensor::random(
                [classes.max(1), inputs],
                Distribution::Uniform(-bound, bound),
                device,
            )),
        }
    }

    /// One score per patch, `[n]`: high for what it takes as real.
    pub fn forward(&self, patches: Tensor<4>, classes: Tensor<1, Int>) -> Tensor<1> {
        let mut x = patches;
        for block in &self.blocks {
            x = block.forward(x);
        }
        let [n, c, _, _] = x.dims();
        let features = x.sum_dim(3).sum_dim(2).reshape([n, c]);
        let score = self.score.val();
        let score = score.clone() / spectral_norm(score).reshape([1, 1]);
        let plain = features
            .clone()
            .matmul(score.transpose())
            .reshape([n])
            .add(self.score_bias.val());
        let embedding = self.embedding.val();
        let embedding = embedding.clone() / spectral_norm(embedding).reshape([1, 1]);
        let embedded = embedding.select(0, classes);
        let projected = (embedded * features).sum_dim(1).reshape([n]);
        plain + projected
    }
}

/// The largest singular value of `matrix` (`[rows, columns]`), `[1]`, by power iteration
/// from a fixed start on the detached weight; the gradient reaches the weight through
/// u^T W v with u and v held constant, as Miyato et al.'s spectral normalisation takes it.
/// A fixed start rather than one carried between steps: burn's forward cannot update a
/// module's state, and a few iterations from the same start cost only matrix-vector
/// products on the weight.
pub fn spectral_norm(matrix: Tensor<2>) -> Tensor<1> {
    let [rows, _] = matrix.dims();
    let plain = matrix.clone().detach();
    let device = plain.device();
    let mut u = Tensor::<2>::ones([rows, 1], &device).div_scalar((rows as f64).sqrt());
    let mut v = unit(plain.clone().transpose().matmul(u.clone()));
    for _ in 1..POWER_ITERATIONS {
        u = unit(plain.clone().matmul(v.clone()));
        v = unit(plain.clone().transpose().matmul(u.clone()));
    }
    u = unit(plain.matmul(v.clone()));
    u.transpose().matmul(matrix).matmul(v).reshape([1])
}

/// `x` scaled to unit length.
fn unit(x: Tensor<2>) -> Tensor<2> {
    let norm = x.clone().square().sum().sqrt().add_scalar(1e-12);
    x / norm.reshape([1, 1])
}
