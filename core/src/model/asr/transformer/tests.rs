//! The stacks run layer by layer with the host kernels against burn's own forward of the
//! same modules: outputs and gradients equal.

use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::transformer::{
    TransformerDecoderConfig, TransformerDecoderInput, TransformerEncoderConfig,
    TransformerEncoderInput,
};
use burn::tensor::{Distribution, Tensor};

use super::{LAYER_NORM_EPSILON, decode, encode, padding_mask};
use crate::backend::BackendKind;
use crate::model::cpu_kernels::values;

fn assert_close(ours: &[f32], theirs: &[f32], what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}");
    let scale = theirs.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1.0);
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        assert!(
            (a - b).abs() <= 2e-4 * scale,
            "{what}[{i}]: {a} against {b}"
        );
    }
}

/// Two pre-norm encoder layers and two decoder layers, sequences padded by different
/// amounts: the decoder's output (which reads the encoder's) and the gradients of the
/// inputs and of a parameter of each stack, for a weighted sum of the output, equal burn's.
#[test]
fn host_layers_equal_burns() {
    let device = BackendKind::Flex.device().unwrap().autodiff();
    device.seed(3);
    let (d, heads, ff) = (16, 4, 32);
    let encoder = TransformerEncoderConfig::new(d, ff, heads, 2)
        .with_norm_first(true)
        .with_dropout(0.0)
        .with_layer_norm_eps(LAYER_NORM_EPSILON)
        .init(&device);
    let decoder = TransformerDecoderConfig::new(d, ff, heads, 2)
        .with_norm_first(true)
        .with_dropout(0.0)
        .with_layer_norm_eps(LAYER_NORM_EPSILON)
        .init(&device);
    let (frames, tokens) = (vec![9, 6, 2], vec![5, 3, 1]);
    let x = Tensor::<3>::random([3, 9, d], Distribution::Normal(0.0, 1.0), &device);
    let y = Tensor::<3>::random([3, 5, d], Distribution::Normal(0.0, 1.0), &device);
    let weights = Tensor::<3>::random([3, 5, d], Distribution::Normal(0.0, 1.0), &device);
    let run = |ours: bool| {
        let (x, y) = (x.clone().require_grad(), y.clone().require_grad());
        let out = if ours {
            let memory = encode(&encoder, x.clone(), &frames);
            decode(&decoder, y.clone(), &tokens, memory, &frames)
        } else {
            let memory = encoder.forward(
                TransformerEncoderInput::new(x.clone()).mask_pad(padding_mask(&frames, 9, &device)),
            );
            decoder.forward(
                TransformerDecoderInput::new(y.clone(), memory)
                    .target_mask_attn(generate_autoregressive_mask(3, 5, &device))
                    .target_mask_pad(padding_mask(&tokens, 5, &device))
                    .memory_mask_pad(padding_mask(&frames, 9, &device)),
            )
        };
        let grads = (out.clone() * weights.clone()).sum().backward();
        (
            values(out),
            values(x.grad(&grads).unwrap()),
            values(y.grad(&grads).unwrap()),
            values(encoder.layers[0].mha.key.weight.grad(&grads).unwrap()),
            values(decoder.layers[1].norm_1.gamma.grad(&grads).unwrap()),
        )
    };
    let ours = run(true);
    let theirs = run(false);
    assert_close(&ours.0, &theirs.0, "output");
    assert_close(&ours.1, &theirs.1, "encoder input's gradient");
    assert_close(&ours.2, &theirs.2, "decoder input's gradient");
    assert_close(&ours.3, &theirs.3, "an encoder key projection's gradient");
    assert_close(&ours.4, &theirs.4, "a decoder norm's gradient");
    // The padding frames of the third sequence feed nothing back.
    assert!(ours.1[2 * 9 * d + 2 * d..].iter().all(|&g| g == 0.0));
}
