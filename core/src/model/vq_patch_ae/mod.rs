//! The default model: the VQ patch autoencoder of `shared/MODEL.md` (seed 001's network).
//!
//! Encoder of four convolutions down to a 64 x 8 x 8 latent, a 512-code quantizer with a
//! straight-through gradient, and a decoder of three transpose convolutions and one
//! convolution back to 1 x 64 x 64. 392,193 parameters, as PyTorch counts them.

use burn::module::{Module, Param};
use burn::nn::PaddingConfig2d;
use burn::nn::conv::{Conv2d, Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig};
use burn::tensor::{Device, Distribution, Int, Tensor};
use serde::{Deserialize, Serialize};

mod engine;
mod forward;
mod sizes;

pub use sizes::{StepForms, activation_floats_per_patch};

use super::layers::LayerForms;

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

#[cfg(test)]
mod tests;
