//! The default model: the VQ patch autoencoder of `shared/MODEL.md` (seed 001's network).
//!
//! Encoder of four convolutions down to a 64 x 8 x 8 latent, a 512-code quantizer with a
//! straight-through gradient, and a decoder of three transpose convolutions and one
//! convolution back to 1 x 64 x 64. 392,193 parameters, as PyTorch counts them.

use burn::module::{Module, Param};
use burn::nn::PaddingConfig2d;
use burn::nn::conv::{Conv2d, Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig};
use burn::tensor::{Device, Distribution, FloatDType, Int, Tensor};
use serde::{Deserialize, Serialize};

use burn::tensor::TensorData;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::layers::{LayerForms, conv, to_f32, up};
use super::nearest_code;
use super::{AnalyticStep, ModelConfig, PatchShape, Patches, SpectrogramModel, StepLoss};
use crate::backend::BackendKind;
use crate::precision::Precision;

/// The shape of the default model; the values are MODEL.md's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VqAutoencoderConfig {
    pub codes: usize,
    pub latent_channels: usize,
    /// Weight of the commitment term, MSE(latent, sg[quantized]).
    pub beta: f32,
    /// How the layers and the quantizer are computed (the same function either way).
    #[serde(default)]
    pub forms: LayerForms,
}

impl Default for VqAutoencoderConfig {
    fn default() -> Self {
        Self {
            codes: 512,
            latent_channels: 64,
            beta: 0.25,
            forms: LayerForms::Auto,
        }
    }
}

#[derive(Module, Debug)]
pub struct VqAutoencoder {
    pub(crate) enc1: Conv2d,
    pub(crate) enc2: Conv2d,
    pub(crate) enc3: Conv2d,
    pub(crate) latent: Conv2d,
    codebook: Param<Tensor<2>>,
    pub(crate) dec1: ConvTranspose2d,
    pub(crate) dec2: ConvTranspose2d,
    pub(crate) dec3: ConvTranspose2d,
    pub(crate) out: Conv2d,
    beta: f32,
    #[module(skip)]
    forms: LayerForms,
}

/// What one forward pass gives: enough for the loss and for anomaly scores.
#[derive(Debug, Clone)]
pub struct VqOutput {
    /// `[n, 1, 64, 64]`.
    pub reconstruction: Tensor<4>,
    /// Encoder output, `[n, 64, 8, 8]`.
    pub latent: Tensor<4>,
    /// Nearest codebook vectors, `[n, 64, 8, 8]`, still attached to the codebook.
    pub quantized: Tensor<4>,
    /// Index of the chosen code per latent position, `[n * 8 * 8]`.
    pub codes: Tensor<1, Int>,
}

/// The three loss terms of MODEL.md, each a mean over its elements.
#[derive(Debug, Clone)]
pub struct VqLoss {
    pub total: Tensor<1>,
    pub reconstruction: Tensor<1>,
    pub codebook: Tensor<1>,
    pub commitment: Tensor<1>,
}

impl VqAutoencoderConfig {
    pub fn init(&self, device: &Device) -> VqAutoencoder {
        let conv = |i, o, stride| {
            Conv2dConfig::new([i, o], [3, 3])
                .with_stride([stride, stride])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device)
        };
        let up = |i, o| {
            ConvTranspose2dConfig::new([i, o], [4, 4])
                .with_stride([2, 2])
                .with_padding([1, 1])
                .init(device)
        };
        let bound = 1.0 / self.codes as f64;
        let codebook = Tensor::random(
            [self.codes, self.latent_channels],
            Distribution::Uniform(-bound, bound),
            device,
        );
        VqAutoencoder {
            enc1: conv(1, 32, 2),
            enc2: conv(32, 64, 2),
            enc3: conv(64, 96, 2),
            latent: conv(96, self.latent_channels, 1),
            codebook: Param::from_tensor(codebook),
            dec1: up(self.latent_channels, 96),
            dec2: up(96, 64),
            dec3: up(64, 32),
            out: conv(32, 1, 1),
            beta: self.beta,
            forms: self.forms,
        }
    }
}

impl VqAutoencoder {
    /// The same model computing its layers in `forms`.
    pub fn with_forms(mut self, forms: LayerForms) -> Self {
        self.forms = forms;
        self
    }

    pub fn forms(&self) -> LayerForms {
        self.forms
    }

    pub fn encode(&self, patches: Tensor<4>) -> Tensor<4> {
        self.encode_in(patches, None)
    }

    /// The encoder with convolutions in `compute` precision (`None`: as stored, f32); the
    /// latent comes back in that precision.
    pub fn encode_in(&self, patches: Tensor<4>, compute: Option<FloatDType>) -> Tensor<4> {
        self.encode_observed(patches, compute, &mut |_| {})
    }

    fn encode_observed(
        &self,
        patches: Tensor<4>,
        compute: Option<FloatDType>,
        after: &mut dyn FnMut(&'static str),
    ) -> Tensor<4> {
        let x = match compute {
            Some(dt) => patches.cast(dt),
            None => patches,
        };
        let x = conv(&self.enc1, x, compute, self.forms, true);
        after("enc1");
        let x = conv(&self.enc2, x, compute, self.forms, true);
        after("enc2");
        let x = conv(&self.enc3, x, compute, self.forms, true);
        after("enc3");
        let latent = conv(&self.latent, x, compute, self.forms, false);
        after("latent");
        latent
    }

    /// Nearest code per latent position by squared L2 distance.
    ///
    /// The choice is made on detached values: only which code matters, and it keeps the
    /// distances out of the autodiff graph. On wgpu a fused kernel makes it without the
    /// `[positions x codes]` distance matrix at all ([`nearest_code`]).
    pub fn quantize(&self, latent: &Tensor<4>) -> (Tensor<4>, Tensor<1, Int>) {
        let [n, d, h, w] = latent.dims();
        let flat = latent
            .clone()
            .detach()
            .permute([0, 2, 3, 1])
            .reshape([n * h * w, d]);
        let codebook = self.codebook.val();
        let codes = nearest_code::nearest_codes(flat, codebook.clone().detach(), self.forms);
        let quantized = codebook
            .select(0, codes.clone())
            .reshape([n, h, w, d])
            .permute([0, 3, 1, 2]);
        (quantized, codes)
    }

    /// Replaces the codebook with `codes` latent vectors (`[codes, latent_channels]`).
    ///
    /// Training starts from codes drawn from the encoder's own outputs: codes initialised
    /// near zero (the reference's uniform(-1/K, 1/K)) sit far from the latents, so a few
    /// codes take every position and the commitment loss diverges.
    pub fn set_codebook(mut self, codes: Tensor<2>) -> Self {
        assert_eq!(codes.dims(), self.codebook.val().dims(), "codebook shape");
        // Same parameter id, so optimizer state and checkpoints keep referring to it.
        self.codebook = Param::initialized(self.codebook.id, codes.require_grad());
        self
    }

    pub fn decode(&self, quantized: Tensor<4>) -> Tensor<4> {
        self.decode_in(quantized, None)
    }

    /// The decoder in `compute` precision; the reconstruction comes back in f32.
    pub fn decode_in(&self, quantized: Tensor<4>, compute: Option<FloatDType>) -> Tensor<4> {
        self.decode_observed(quantized, compute, &mut |_| {})
    }

    fn decode_observed(
        &self,
        quantized: Tensor<4>,
        compute: Option<FloatDType>,
        after: &mut dyn FnMut(&'static str),
    ) -> Tensor<4> {
        let x = match compute {
            Some(dt) => quantized.cast(dt),
            None => quantized,
        };
        let x = up(&self.dec1, x, compute, self.forms, true);
        after("dec1");
        let x = up(&self.dec2, x, compute, self.forms, true);
        after("dec2");
        let x = up(&self.dec3, x, compute, self.forms, true);
        after("dec3");
        let reconstruction = to_f32(conv(&self.out, x, compute, self.forms, false), compute);
        after("out");
        reconstruction
    }

    pub fn forward(&self, patches: Tensor<4>) -> VqOutput {
        self.forward_in(patches, None)
    }

    /// The forward pass with encoder and decoder in `compute` precision (mixed precision:
    /// activations kept for backward take half the memory in f16/bf16). The quantizer and
    /// everything the loss reads are f32.
    pub fn forward_in(&self, patches: Tensor<4>, compute: Option<FloatDType>) -> VqOutput {
        self.forward_observed(patches, compute, &mut |_| {})
    }

    /// [`VqAutoencoder::forward_in`], calling `after` with each stage's name (`enc1` ...
    /// `latent`, `quantizer`, `dec1` ... `out`) once its output exists: the hook of the
    /// memory trace (`bench::memory_trace`).
    pub fn forward_observed(
        &self,
        patches: Tensor<4>,
        compute: Option<FloatDType>,
        after: &mut dyn FnMut(&'static str),
    ) -> VqOutput {
        let latent = to_f32(self.encode_observed(patches, compute, after), compute);
        let (quantized, codes) = self.quantize(&latent);
        after("quantizer");
        // Straight-through: the decoder sees the codes, the encoder gets the decoder's gradient.
        let straight_through = latent.clone() + (quantized.clone() - latent.clone()).detach();
        VqOutput {
            reconstruction: self.decode_observed(straight_through, compute, after),
            latent,
            quantized,
            codes,
        }
    }

    /// MSE(reconstruction, input) + MSE(quantized, sg[latent]) + beta * MSE(latent, sg[quantized]).
    pub fn losses(&self, patches: Tensor<4>, output: &VqOutput) -> VqLoss {
        let mse = |a: Tensor<4>, b: Tensor<4>| (a - b).square().mean();
        let reconstruction = mse(output.reconstruction.clone(), patches);
        let codebook = mse(output.quantized.clone(), output.latent.clone().detach());
        let commitment = mse(output.latent.clone(), output.quantized.clone().detach());
        let total =
            reconstruction.clone() + codebook.clone() + commitment.clone().mul_scalar(self.beta);
        VqLoss {
            total,
            reconstruction,
            codebook,
            commitment,
        }
    }

    /// Reconstruction MSE of each patch, `[n]`: the anomaly score before averaging per clip.
    pub fn patch_errors(&self, patches: Tensor<4>) -> Tensor<1> {
        let n = patches.dims()[0];
        let output = self.forward(patches.clone());
        (output.reconstruction - patches)
            .square()
            .reshape([n, 64 * 64])
            .mean_dim(1)
            .reshape([n])
    }
}

/// Parameters of the default model, as PyTorch counts them.
fn parameter_count(model: &VqAutoencoderConfig) -> u64 {
    let conv = |i: u64, o: u64, k: u64| i * o * k * k + o;
    let c = model.latent_channels as u64;
    conv(1, 32, 3)
        + conv(32, 64, 3)
        + conv(64, 96, 3)
        + conv(96, c, 3)
        + model.codes as u64 * c
        + conv(c, 96, 4)
        + conv(96, 64, 4)
        + conv(64, 32, 4)
        + conv(32, 1, 3)
}

/// How a backend computes the model, as far as memory goes: which forms of its layers and
/// quantizer run (`model::LayerForms::Auto` picks them per device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepForms {
    /// burn's layers: a convolution keeps its input and the ReLU after it its own input,
    /// so each hidden activation is held twice; the quantizer builds its distance matrix.
    Plain,
    /// flex's kernels: the six hidden layers but the first keep their output once.
    FlexKernels,
    /// cubecl's output-only layers (all six hidden layers once); `nearest_code_kernel`
    /// where wgpu's quantizer kernel replaces the distance matrix.
    CubeLayers { nearest_code_kernel: bool },
}

impl StepForms {
    /// The forms a training step on `backend` in `precision` runs (flex's kernels are
    /// f32 only; the quantizer is f32 in every precision).
    pub fn of(backend: BackendKind, precision: Precision) -> Self {
        match backend {
            BackendKind::Flex if precision == Precision::F32 => Self::FlexKernels,
            BackendKind::Flex => Self::Plain,
            BackendKind::Wgpu => Self::CubeLayers {
                nearest_code_kernel: true,
            },
            BackendKind::Cuda => Self::CubeLayers {
                nearest_code_kernel: false,
            },
            BackendKind::Ndarray => Self::Plain,
        }
    }

    /// How many copies of hidden layer `i` (0-5: enc1, enc2, enc3, dec1, dec2, dec3) autodiff
    /// keeps: its output, and its pre-activation where the ReLU is burn's.
    fn copies(self, layer: usize) -> u64 {
        match self {
            Self::Plain => 2,
            Self::FlexKernels if layer == 0 => 2,
            Self::FlexKernels | Self::CubeLayers { .. } => 1,
        }
    }

    fn distance_matrix(self) -> bool {
        !matches!(
            self,
            Self::CubeLayers {
                nearest_code_kernel: true
            }
        )
    }
}

/// Floats autodiff keeps per patch: each hidden layer's output (twice where burn's ReLU
/// keeps the pre-activation too, see [`StepForms`]), the latent, its quantized copy, the
/// reconstruction and the reconstruction error the loss differentiates.
pub fn activation_floats_per_patch(model: &VqAutoencoderConfig, forms: StepForms) -> u64 {
    let c = model.latent_channels as u64;
    let map = |channels: u64, side: u64| channels * side * side;
    let hidden = [
        map(32, 32),
        map(64, 16),
        map(96, 8),
        map(96, 16),
        map(64, 32),
        map(32, 64),
    ];
    let hidden: u64 = (0..6).map(|i| forms.copies(i) * hidden[i]).sum();
    let latent = map(c, 8);
    let quantizer = 2 * map(c, 8);
    let reconstruction = map(1, 64);
    let loss = map(1, 64);
    hidden + latent + quantizer + reconstruction + loss
}

/// How much of the train split's latents the codebook is drawn from: four latent vectors per
/// code, so that each code starts at a distinct position.
const LATENTS_PER_CODE: usize = 4;

impl SpectrogramModel for VqAutoencoder {
    type Config = VqAutoencoderConfig;

    /// MODEL.md's three-term loss through the quantizer; in the warm-up, the reconstruction
    /// through encoder and decoder alone, which gives the codebook informative latents to
    /// start from.
    fn loss(&self, batch: Patches, precision: Precision, warming_up: bool) -> StepLoss {
        let patches = batch.values;
        let compute = precision.compute_dtype();
        if warming_up {
            let latent = self.encode_in(patches.clone(), compute);
            let reconstruction = self.decode_in(latent, compute);
            let loss = (reconstruction - patches).square().mean();
            return StepLoss {
                total: loss.clone(),
                reported: loss,
            };
        }
        let output = self.forward_in(patches.clone(), compute);
        let loss = self.losses(patches, &output);
        StepLoss {
            total: loss.total,
            reported: loss.reconstruction,
        }
    }

    fn patch_scores(&self, batch: Patches) -> Tensor<1> {
        self.patch_errors(batch.values)
    }

    /// Draws the initial codebook from the encoder's outputs on train patches (see
    /// [`VqAutoencoder::set_codebook`]): one latent vector per code, from distinct positions.
    async fn end_warm_up(
        self,
        train: &mut dyn Iterator<Item = Patches>,
        seed: u64,
    ) -> Result<Self, crate::readback::ReadbackError> {
        let [codes, channels] = self.codebook.val().dims();
        let device = self.codebook.val().device();
        let encoder = self.valid();
        let mut latents: Vec<f32> = Vec::new();
        for batch in train {
            let z = encoder.encode(batch.values).permute([0, 2, 3, 1]);
            latents.extend(crate::readback::floats(z).await?);
            if latents.len() >= LATENTS_PER_CODE * codes * channels {
                break;
            }
        }
        let positions = latents.len() / channels;
        if positions == 0 {
            return Ok(self);
        }
        let mut order: Vec<usize> = (0..positions).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ 0xc0de_b00c));
        let mut chosen = Vec::with_capacity(codes * channels);
        for i in 0..codes {
            let p = order[i % positions];
            chosen.extend_from_slice(&latents[p * channels..(p + 1) * channels]);
        }
        let codebook = Tensor::from_data(TensorData::new(chosen, [codes, channels]), &device);
        Ok(self.set_codebook(codebook))
    }
}

impl ModelConfig for VqAutoencoderConfig {
    type Model = VqAutoencoder;
    const NAME: &'static str = "vq-patch-ae";
    const SUMMARY: &'static str =
        "the default: a VQ autoencoder of 64 x 64 log-mel patches (shared/MODEL.md)";

    fn init(&self, device: &Device) -> VqAutoencoder {
        VqAutoencoderConfig::init(self, device)
    }

    fn input(&self) -> PatchShape {
        PatchShape {
            mels: 64,
            frames: 64,
        }
    }

    fn parameter_count(&self) -> u64 {
        parameter_count(self)
    }

    fn analytic_step(
        &self,
        backend: BackendKind,
        precision: Precision,
        patches: usize,
    ) -> AnalyticStep {
        let forms = match self.forms {
            LayerForms::Auto => StepForms::of(backend, precision),
            LayerForms::Plain => StepForms::Plain,
        };
        self.analytic_with(forms, patches)
    }

    /// A tenth of the run: started cold, this model's codes collapse and the commitment term
    /// diverges (measured in PyTorch and here; docs/TRAINING.md).
    fn default_warm_up_steps(&self, total_steps: u64) -> u64 {
        total_steps / 10
    }
}

impl VqAutoencoderConfig {
    /// The analytic sizes of a step of `patches` patches computed in `forms`.
    pub fn analytic_with(&self, forms: StepForms, patches: usize) -> AnalyticStep {
        const F32: u64 = 4;
        let p = patches as u64;
        let latent_positions = p * 8 * 8;
        let distances = if forms.distance_matrix() {
            latent_positions * self.codes as u64 * F32
        } else {
            0
        };
        AnalyticStep {
            parameters: parameter_count(self) * F32,
            activations: p * activation_floats_per_patch(self, forms) * F32,
            data: p * 64 * 64 * F32 + distances,
        }
    }
}

/// Every parameter value in visiting order: for comparing models in tests and tools.
pub fn flat_parameters<M: Module>(model: &M) -> Vec<f32> {
    struct Collect(Vec<f32>);
    impl burn::module::ModuleVisitor for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let values = param.val().into_data().convert::<f32>();
            self.0.extend(values.as_slice::<f32>().unwrap_or(&[]));
        }
    }
    let mut collect = Collect(Vec::new());
    model.visit(&mut collect);
    collect.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;
    use burn::tensor::activation::relu;

    /// Loss and every parameter's gradient of one step on `patches`, the layers computed in
    /// `compute` precision.
    fn loss_and_gradients(
        model: &VqAutoencoder,
        patches: Tensor<4>,
        compute: Option<FloatDType>,
    ) -> (f32, Vec<Vec<f32>>) {
        struct Collect<'a>(&'a burn::optim::GradientsParams, Vec<Vec<f32>>);
        impl burn::module::ModuleVisitor for Collect<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let grad = self
                    .0
                    .get::<D>(param.id)
                    .expect("every parameter has a gradient");
                self.1.push(
                    grad.into_data()
                        .convert::<f32>()
                        .try_to_vec::<f32>()
                        .unwrap(),
                );
            }
        }
        let output = model.forward_in(patches.clone(), compute);
        // Scaled in half precision as training scales it (`Precision::loss_scale`), or the
        // first layer's f16 gradients underflow to zero.
        let scale = if compute.is_some() { 1024.0 } else { 1.0 };
        let loss = model.losses(patches, &output).total.mul_scalar(scale);
        let value = loss.clone().into_scalar::<f32>();
        let grads = burn::optim::GradientsParams::from_grads(loss.backward(), model);
        let mut collect = Collect(&grads, Vec::new());
        model.visit(&mut collect);
        (value, collect.1)
    }

    /// The CPU forms and kernels against burn's own convolutions: same loss, same gradient
    /// for every parameter, on random patches and a random model, with and without
    /// gradient checkpointing.
    #[test]
    fn cpu_layers_match_the_plain_path() {
        layers_match_the_plain_path(BackendKind::Flex, None, 1e-4);
    }

    /// The same on wgpu (lavapipe in CI): the output-only layers of `gpu_layers` and the
    /// quantizer's nearest-code kernel against burn's layers and the distance matrix.
    #[cfg(feature = "wgpu")]
    #[test]
    fn gpu_layers_match_the_plain_path() {
        layers_match_the_plain_path(BackendKind::Wgpu, None, 1e-4);
    }

    /// The output-only layers in mixed precision (f16 compute) against burn's layers in the
    /// same precision; f16's 11-bit mantissa sets the tolerance.
    #[cfg(feature = "wgpu")]
    #[test]
    fn gpu_layers_match_the_plain_path_in_half_precision() {
        let device = BackendKind::Wgpu.device().unwrap();
        if !device.supports_dtype(burn::tensor::DType::F16) {
            eprintln!("this wgpu adapter has no f16: nothing to compare");
            return;
        }
        layers_match_the_plain_path(BackendKind::Wgpu, Some(FloatDType::F16), 2e-2);
    }

    fn layers_match_the_plain_path(
        backend: BackendKind,
        compute: Option<FloatDType>,
        tolerance: f32,
    ) {
        for checkpointing in [false, true] {
            let device = backend.training_device(None, checkpointing).unwrap();
            device.seed(7);
            let fast = VqAutoencoderConfig::default().init(&device);
            assert_eq!(fast.forms(), LayerForms::Auto);
            // Codes drawn near the latents, as training starts, so that the quantizer picks
            // many codes and every parameter gets a gradient.
            let x = Tensor::<4>::random([5, 1, 64, 64], Distribution::Normal(0.0, 1.0), &device);
            let latent = fast.encode(x.clone()).detach();
            // Near the latents, not on them: a code equal to its latent has no gradient.
            let from_latents = latent.permute([0, 2, 3, 1]).reshape([5 * 64, 64])
                + Tensor::random([5 * 64, 64], Distribution::Normal(0.0, 0.01), &device);
            let others =
                Tensor::random([512 - 5 * 64, 64], Distribution::Normal(0.0, 0.1), &device);
            let codes = Tensor::cat(vec![from_latents, others], 0);
            let fast = fast.set_codebook(codes);
            let plain = fast.clone().with_forms(LayerForms::Plain);
            let (fast_loss, fast_grads) = loss_and_gradients(&fast, x.clone(), compute);
            let (plain_loss, plain_grads) = loss_and_gradients(&plain, x, compute);
            assert!(
                (fast_loss - plain_loss).abs() <= tolerance / 10.0 * plain_loss.abs(),
                "{fast_loss} against {plain_loss}"
            );
            assert_eq!(fast_grads.len(), plain_grads.len());
            for (i, (f, p)) in fast_grads.iter().zip(&plain_grads).enumerate() {
                let scale = p.iter().fold(0f32, |m, v| m.max(v.abs()));
                assert!(scale > 0.0, "parameter {i} has no gradient");
                for (a, b) in f.iter().zip(p) {
                    assert!(
                        (a - b).abs() <= tolerance * scale,
                        "parameter {i} (checkpointing {checkpointing}): {a} against {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn parameter_count_matches_pytorch() {
        let device = BackendKind::Flex.device().unwrap();
        let model = VqAutoencoderConfig::default().init(&device);
        assert_eq!(model.num_params(), 392_193);
        assert_eq!(flat_parameters(&model).len(), 392_193);
    }

    #[test]
    fn every_stage_has_the_documented_shape() {
        let device = BackendKind::Flex.device().unwrap();
        let model = VqAutoencoderConfig::default().init(&device);
        let x = Tensor::<4>::random([3, 1, 64, 64], Distribution::Normal(0.0, 1.0), &device);
        let e1 = relu(model.enc1.forward(x.clone()));
        assert_eq!(e1.dims(), [3, 32, 32, 32]);
        let e2 = relu(model.enc2.forward(e1));
        assert_eq!(e2.dims(), [3, 64, 16, 16]);
        let e3 = relu(model.enc3.forward(e2));
        assert_eq!(e3.dims(), [3, 96, 8, 8]);
        let z = model.latent.forward(e3);
        assert_eq!(z.dims(), [3, 64, 8, 8]);
        let (q, codes) = model.quantize(&z);
        assert_eq!(q.dims(), [3, 64, 8, 8]);
        assert_eq!(codes.dims(), [3 * 64]);
        let d1 = relu(model.dec1.forward(q));
        assert_eq!(d1.dims(), [3, 96, 16, 16]);
        let d2 = relu(model.dec2.forward(d1));
        assert_eq!(d2.dims(), [3, 64, 32, 32]);
        let d3 = relu(model.dec3.forward(d2));
        assert_eq!(d3.dims(), [3, 32, 64, 64]);
        assert_eq!(model.out.forward(d3).dims(), [3, 1, 64, 64]);
        assert_eq!(model.patch_errors(x).dims(), [3]);
    }

    #[test]
    fn quantizer_picks_the_nearest_code() {
        let device = BackendKind::Flex.device().unwrap();
        let model = VqAutoencoderConfig::default().init(&device);
        let latent = Tensor::<4>::random([2, 64, 8, 8], Distribution::Normal(0.0, 0.01), &device);
        let (quantized, codes) = model.quantize(&latent);
        let codebook: Vec<f32> = model
            .codebook
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let z: Vec<f32> = latent
            .permute([0, 2, 3, 1])
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let codes: Vec<i64> = codes
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .unwrap();
        let q: Vec<f32> = quantized
            .permute([0, 2, 3, 1])
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        for (pos, &code) in codes.iter().enumerate() {
            let zpos = &z[pos * 64..(pos + 1) * 64];
            let dist = |c: usize| -> f32 {
                zpos.iter()
                    .zip(&codebook[c * 64..(c + 1) * 64])
                    .map(|(a, b)| (a - b).powi(2))
                    .sum()
            };
            let best = (0..512)
                .min_by(|&a, &b| dist(a).total_cmp(&dist(b)))
                .unwrap();
            assert!(
                dist(code as usize) <= dist(best) * (1.0 + 1e-4) + 1e-9,
                "position {pos}"
            );
            assert_eq!(
                &q[pos * 64..(pos + 1) * 64],
                &codebook[code as usize * 64..(code as usize + 1) * 64]
            );
        }
    }

    #[test]
    fn the_analytic_count_matches_the_built_model() {
        assert_eq!(VqAutoencoderConfig::default().parameter_count(), 392_193);
    }

    /// burn's layers keep each hidden activation twice; the output-only forms once; the
    /// nearest-code kernel drops the distance matrix.
    #[test]
    fn the_forms_change_what_a_patch_keeps() {
        let model = VqAutoencoderConfig::default();
        let hidden_once =
            32 * 32 * 32 + 64 * 16 * 16 + 96 * 8 * 8 + 96 * 16 * 16 + 64 * 32 * 32 + 32 * 64 * 64;
        let plain = activation_floats_per_patch(&model, StepForms::Plain);
        let cube = StepForms::of(BackendKind::Wgpu, Precision::F32);
        assert_eq!(
            plain - activation_floats_per_patch(&model, cube),
            hidden_once
        );
        let flex =
            activation_floats_per_patch(&model, StepForms::of(BackendKind::Flex, Precision::F32));
        assert_eq!(plain - flex, hidden_once - 32 * 32 * 32);
        assert_eq!(
            StepForms::of(BackendKind::Flex, Precision::F16),
            StepForms::Plain
        );
        assert_eq!(StepForms::of(BackendKind::Wgpu, Precision::F16), cube);
        let with = model.analytic_with(StepForms::Plain, 10);
        let without = model.analytic_with(cube, 10);
        assert_eq!(with.data - without.data, 10 * 64 * 512 * 4);
    }
}
