//! The default model: the VQ patch autoencoder of `shared/MODEL.md` (seed 001's network).
//!
//! Encoder of four convolutions down to a 64 x 8 x 8 latent, a 512-code quantizer with a
//! straight-through gradient, and a decoder of three transpose convolutions and one
//! convolution back to 1 x 64 x 64. 392,193 parameters, as PyTorch counts them.

use burn::module::{Module, Param};
use burn::nn::PaddingConfig2d;
use burn::nn::conv::{Conv2d, Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig};
use burn::tensor::module::{conv_transpose2d, conv2d};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use burn::tensor::{Device, Distribution, FloatDType, Int, Tensor};
use serde::{Deserialize, Serialize};

pub mod cpu_forms;
#[cfg(feature = "flex")]
pub mod cpu_kernels;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod gpu_layers;
pub mod nearest_code;
#[cfg(any(feature = "flex", feature = "wgpu", feature = "cuda"))]
mod output_only;

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

/// How the convolutions are computed. Both give the same function and gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerForms {
    /// On CPU backends, the first and last layers as matrix products ([`cpu_forms`]) and,
    /// on flex, the others with the gradient kernels of `cpu_kernels`; elsewhere burn's
    /// convolutions (and in f16/bf16 everywhere on the CPU). On cubecl devices (wgpu, CUDA)
    /// each layer with its ReLU as one op that keeps only its output (`gpu_layers`, in any
    /// precision), and on wgpu the quantizer's nearest-code kernel ([`nearest_code`]).
    #[default]
    Auto,
    /// burn's convolutions and the tensor-code quantizer everywhere: the reference the
    /// faster forms are tested against.
    Plain,
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

/// A convolution computed in `compute` precision: its weights are cast where they are used,
/// so the parameters (and the optimizer's view of them) stay f32 and receive f32 gradients
/// through the cast, as mixed precision keeps master weights.
///
/// With `relu`, the ReLU after the layer: part of the layer's call where a CPU form fuses it.
pub(crate) fn conv(
    layer: &Conv2d,
    x: Tensor<4>,
    compute: Option<FloatDType>,
    forms: LayerForms,
    relu: bool,
) -> Tensor<4> {
    if compute.is_none() && forms == LayerForms::Auto && cpu_forms::is_cpu(&x.device()) {
        return cpu_forms::conv(layer, x, relu);
    }
    let weight = cast_to(layer.weight.val(), compute);
    let bias = layer.bias.as_ref().map(|b| cast_to(b.val(), compute));
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    if let (LayerForms::Auto, Some(bias)) = (forms, &bias)
        && gpu_layers::runs_on(&x.device())
    {
        return gpu_layers::conv(x, weight, bias.clone(), conv_options(layer), relu);
    }
    let y = match compute {
        None => layer.forward(x),
        Some(_) => conv2d(x, weight, bias, conv_options(layer)),
    };
    relu_if(y, relu)
}

/// `t` in `compute` precision, or as stored.
fn cast_to<const D: usize>(t: Tensor<D>, compute: Option<FloatDType>) -> Tensor<D> {
    match compute {
        Some(dt) => t.cast(dt),
        None => t,
    }
}

fn conv_options(layer: &Conv2d) -> ConvOptions<2> {
    // The model builds every convolution with explicit padding (burn keeps its resolver for
    // `Same` private); `Valid` is no padding.
    let padding = match layer.padding {
        PaddingConfig2d::Explicit(top, left, bottom, right) => [(top, bottom), (left, right)],
        _ => [(0, 0), (0, 0)],
    };
    ConvOptions::new_with_padding(layer.stride, padding, layer.dilation, layer.groups)
}

fn conv_transpose_options(layer: &ConvTranspose2d) -> ConvTransposeOptions<2> {
    ConvTransposeOptions::new(
        layer.stride,
        layer.padding,
        layer.padding_out,
        layer.dilation,
        layer.groups,
    )
}

pub(crate) fn up(
    layer: &ConvTranspose2d,
    x: Tensor<4>,
    compute: Option<FloatDType>,
    forms: LayerForms,
    relu: bool,
) -> Tensor<4> {
    if compute.is_none() && forms == LayerForms::Auto && cpu_forms::is_cpu(&x.device()) {
        return cpu_forms::up(layer, x, relu);
    }
    let weight = cast_to(layer.weight.val(), compute);
    let bias = layer.bias.as_ref().map(|b| cast_to(b.val(), compute));
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    if let (LayerForms::Auto, Some(bias)) = (forms, &bias)
        && gpu_layers::runs_on(&x.device())
    {
        let options = conv_transpose_options(layer);
        return gpu_layers::conv_transpose(x, weight, bias.clone(), options, relu);
    }
    let y = match compute {
        None => layer.forward(x),
        Some(_) => conv_transpose2d(x, weight, bias, conv_transpose_options(layer)),
    };
    relu_if(y, relu)
}

/// `relu(y)` when `relu`, else `y`.
pub(crate) fn relu_if(y: Tensor<4>, relu: bool) -> Tensor<4> {
    if relu {
        burn::tensor::activation::relu(y)
    } else {
        y
    }
}

fn to_f32(x: Tensor<4>, compute: Option<FloatDType>) -> Tensor<4> {
    match compute {
        Some(_) => x.cast(FloatDType::F32),
        None => x,
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
    pub fn loss(&self, patches: Tensor<4>, output: &VqOutput) -> VqLoss {
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

/// Every parameter value in visiting order: for comparing models in tests and tools.
pub fn flat_parameters(model: &VqAutoencoder) -> Vec<f32> {
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
        let loss = model.loss(patches, &output).total.mul_scalar(scale);
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
}
