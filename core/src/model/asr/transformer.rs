//! The recogniser's encoder and decoder stacks: burn's `TransformerEncoder` and
//! `TransformerDecoder` modules (their parameters and records), run layer by layer here so
//! that on flex each attention is the host kernel (`cpu_kernels::attention`), one autodiff
//! op where burn's `MultiHeadAttention` records a dozen; elsewhere burn's own forward. The
//! layers are pre-norm (`norm_first`), as the recogniser builds them, and computed as burn
//! computes them: the same norms in the same places (burn's encoder layer normalises with
//! `norm_2` before attention and `norm_1` before the feed-forward; its decoder layer with
//! `norm_3`, `norm_1`, `norm_2`).

use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::transformer::{
    TransformerDecoder, TransformerDecoderInput, TransformerEncoder, TransformerEncoderInput,
};
use burn::nn::{LayerNorm, Linear};
use burn::tensor::{Bool, Device, Tensor, TensorData};

/// The epsilon of every layer norm of the recogniser (burn's default, set explicitly so
/// that the host layer norm, which cannot read a `LayerNorm`'s own, uses the same).
pub const LAYER_NORM_EPSILON: f64 = 1e-5;

/// `norm` over `x`: on flex the host layer norm, one autodiff op.
pub fn normalise(norm: &LayerNorm, x: Tensor<3>) -> Tensor<3> {
    #[cfg(feature = "flex")]
    if host::runs(&x) {
        return host::normalise(norm, x);
    }
    norm.forward(x)
}

/// `layer` over `x`: on flex the host linear layer, one autodiff op split over the
/// threads.
pub fn project(layer: &Linear, x: Tensor<3>) -> Tensor<3> {
    #[cfg(feature = "flex")]
    if host::runs(&x) {
        return host::project(layer, x, false);
    }
    layer.forward(x)
}

/// The encoder over `x` (`[n, frames, d_model]`), each sequence `lengths[i]` frames long.
pub fn encode(encoder: &TransformerEncoder, x: Tensor<3>, lengths: &[usize]) -> Tensor<3> {
    #[cfg(feature = "flex")]
    if host::runs(&x) {
        return host::encode(encoder, x, lengths);
    }
    let [_, steps, _] = x.dims();
    let padding = padding_mask(lengths, steps, &x.device());
    encoder.forward(TransformerEncoderInput::new(x).mask_pad(padding))
}

/// The decoder over `x` (`[n, tokens, d_model]`, each row `lengths[i]` tokens, each
/// attending to itself and the tokens before) reading `memory` (`[n, frames, d_model]`,
/// `memory_lengths[i]` frames each).
pub fn decode(
    decoder: &TransformerDecoder,
    x: Tensor<3>,
    lengths: &[usize],
    memory: Tensor<3>,
    memory_lengths: &[usize],
) -> Tensor<3> {
    #[cfg(feature = "flex")]
    if host::runs(&x) {
        return host::decode(decoder, x, lengths, memory, memory_lengths);
    }
    let [n, steps, _] = x.dims();
    let memory_steps = memory.dims()[1];
    let device = x.device();
    let input = TransformerDecoderInput::new(x, memory)
        .target_mask_attn(generate_autoregressive_mask(n, steps, &device))
        .target_mask_pad(padding_mask(lengths, steps, &device))
        .memory_mask_pad(padding_mask(memory_lengths, memory_steps, &device));
    decoder.forward(input)
}

/// `[n, steps]`, true past each row's length (what burn's attention leaves out).
pub fn padding_mask(lengths: &[usize], steps: usize, device: &Device) -> Tensor<2, Bool> {
    let values: Vec<bool> = lengths
        .iter()
        .flat_map(|&len| (0..steps).map(move |i| i >= len))
        .collect();
    Tensor::from_data(TensorData::new(values, [lengths.len(), steps]), device)
}

/// The layers with the host attention, on flex.
#[cfg(feature = "flex")]
mod host {
    use burn::nn::attention::MultiHeadAttention;
    use burn::nn::transformer::{TransformerDecoder, TransformerEncoder};
    use burn::tensor::Tensor;

    use burn::nn::activation::Activation;
    use burn::nn::transformer::PositionWiseFeedForward;
    use burn::nn::{LayerNorm, Linear};

    use super::LAYER_NORM_EPSILON;
    use crate::model::cpu_kernels::{self, attention::KeyMask};

    /// On flex, in f32.
    pub fn runs(x: &Tensor<3>) -> bool {
        cpu_kernels::take(x)
    }

    pub fn encode(encoder: &TransformerEncoder, x: Tensor<3>, lengths: &[usize]) -> Tensor<3> {
        encoder.layers.iter().fold(x, |x, layer| {
            assert!(layer.norm_first, "the recogniser's layers are pre-norm");
            let normed = normalise(&layer.norm_2, x.clone());
            let own = mask(&layer.mha, lengths, false);
            let attended = attend(&layer.mha, normed.clone(), normed, own);
            let x = x + layer.dropout.forward(attended);
            let fed = feed_forward(&layer.pwff, normalise(&layer.norm_1, x.clone()));
            x + layer.dropout.forward(fed)
        })
    }

    pub fn decode(
        decoder: &TransformerDecoder,
        x: Tensor<3>,
        lengths: &[usize],
        memory: Tensor<3>,
        memory_lengths: &[usize],
    ) -> Tensor<3> {
        decoder.layers.iter().fold(x, |x, layer| {
            assert!(layer.norm_first, "the recogniser's layers are pre-norm");
            let normed = normalise(&layer.norm_3, x.clone());
            let own = mask(&layer.self_attn, lengths, true);
            let attended = attend(&layer.self_attn, normed.clone(), normed, own);
            let x = x + layer.dropout.forward(attended);
            let normed = normalise(&layer.norm_1, x.clone());
            let read = mask(&layer.cross_attn, memory_lengths, false);
            let attended = attend(&layer.cross_attn, normed, memory.clone(), read);
            let x = x + layer.dropout.forward(attended);
            let fed = feed_forward(&layer.pwff, normalise(&layer.norm_2, x.clone()));
            x + layer.dropout.forward(fed)
        })
    }

    /// burn's `LayerNorm` forward, its shift included; without one, burn's.
    pub fn normalise(norm: &LayerNorm, x: Tensor<3>) -> Tensor<3> {
        match &norm.beta {
            Some(beta) => cpu_kernels::layer_norm::normalise(
                x,
                norm.gamma.val(),
                beta.val(),
                LAYER_NORM_EPSILON,
            ),
            None => norm.forward(x),
        }
    }

    /// burn's `Linear` forward, GELU after it when `gelu`; without a bias, burn's.
    pub fn project(layer: &Linear, x: Tensor<3>, gelu: bool) -> Tensor<3> {
        match &layer.bias {
            Some(bias) => cpu_kernels::linear::linear(x, layer.weight.val(), bias.val(), gelu),
            None => {
                let y = layer.forward(x);
                if gelu {
                    burn::tensor::activation::gelu(y)
                } else {
                    y
                }
            }
        }
    }

    /// burn's `PositionWiseFeedForward` forward: inner projection and GELU as one op, the
    /// outer projection another.
    fn feed_forward(pwff: &PositionWiseFeedForward, x: Tensor<3>) -> Tensor<3> {
        assert!(
            matches!(pwff.activation, Activation::Gelu(_)),
            "the recogniser's feed-forward blocks use GELU"
        );
        let hidden = pwff.dropout.forward(project(&pwff.linear_inner, x, true));
        project(&pwff.linear_outer, hidden, false)
    }

    fn mask(mha: &MultiHeadAttention, lengths: &[usize], causal: bool) -> KeyMask {
        KeyMask {
            keys: lengths.to_vec(),
            causal,
            masked_score: mha.min_float as f32,
        }
    }

    /// `MultiHeadAttention::forward`'s context through the host kernel: the same
    /// projections, the heads read in place, the same output projection. burn drops out
    /// attention weights after softmax; the kernel has no dropout, so none may be asked.
    fn attend(
        mha: &MultiHeadAttention,
        query: Tensor<3>,
        memory: Tensor<3>,
        mask: KeyMask,
    ) -> Tensor<3> {
        assert_eq!(mha.dropout.prob, 0.0, "the host attention has no dropout");
        let q = project(&mha.query, query, false);
        let k = project(&mha.key, memory.clone(), false);
        let v = project(&mha.value, memory, false);
        let context = cpu_kernels::attention::attend(q, k, v, mha.n_heads, mask);
        project(&mha.output, context, false)
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests;
