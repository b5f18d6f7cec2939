//! The network's passes: encoder, quantizer and decoder, in any compute precision and with
//! the memory trace's hook between stages, and the loss and anomaly scores read from them.

use burn::module::Param;
use burn::tensor::{FloatDType, Int, Tensor};

use super::{VqAutoencoder, VqLoss, VqOutput};
use crate::model::layers::{LayerForms, conv, to_f32, up};
use crate::model::nearest_code;

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
