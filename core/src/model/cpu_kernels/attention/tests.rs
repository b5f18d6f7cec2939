//! The host attention against burn's `MultiHeadAttention` arithmetic (the heads swapped
//! out, the scaled scores, the mask fills, softmax, the values, the heads swapped back),
//! forward and differentiated by autodiff.

use burn::tensor::activation::softmax;
use burn::tensor::{Bool, Distribution, Tensor, TensorData};

use super::super::{assert_close, values};
use super::{KeyMask, attend};
use crate::backend::BackendKind;

const MASKED: f32 = -1.0e4;

fn device() -> burn::tensor::Device {
    BackendKind::Flex.device().unwrap().autodiff()
}

/// What `MultiHeadAttention::forward` computes between its projections.
fn burns(q: Tensor<3>, k: Tensor<3>, v: Tensor<3>, heads: usize, mask: &KeyMask) -> Tensor<3> {
    let [n, queries, features] = q.dims();
    let keys = k.dims()[1];
    let per_head = features / heads;
    let split = |x: Tensor<3>, len| x.reshape([n, len, heads, per_head]).swap_dims(1, 2);
    let mut scores = split(q, queries)
        .matmul(split(k, keys).swap_dims(2, 3))
        .div_scalar((per_head as f32).sqrt());
    let device = scores.device();
    let pad: Vec<bool> = (0..n)
        .flat_map(|s| (0..keys).map(move |key| key >= mask.keys[s]))
        .collect();
    let pad = Tensor::<2, Bool>::from_data(TensorData::new(pad, [n, keys]), &device);
    scores = scores.mask_fill(pad.reshape([n, 1, 1, keys]), mask.masked_score);
    if mask.causal {
        let later: Vec<bool> = (0..n * queries * keys)
            .map(|i| i % keys > (i / keys) % queries)
            .collect();
        let later =
            Tensor::<3, Bool>::from_data(TensorData::new(later, [n, queries, keys]), &device);
        scores = scores.mask_fill(later.reshape([n, 1, queries, keys]), mask.masked_score);
    }
    softmax(scores, 3)
        .matmul(split(v, keys))
        .swap_dims(1, 2)
        .reshape([n, queries, features])
}

/// The output and the gradients of the queries, keys and values, for a weighted sum of
/// the output, equal burn's: self-attention with padding and a causal mask, and
/// cross-attention to keys of another length with padding only (one sequence of a single
/// key).
#[test]
fn output_and_gradients_equal_burns() {
    for (queries, keys, causal) in [(7, 7, true), (5, 9, false)] {
        let device = device();
        device.seed(11);
        let (n, heads, features) = (3, 2, 8);
        let random =
            |len| Tensor::<3>::random([n, len, features], Distribution::Normal(0.0, 1.5), &device);
        let (q, k, v) = (random(queries), random(keys), random(keys));
        let weights = random(queries);
        let mask = KeyMask {
            keys: vec![keys, keys - 2, 1],
            causal,
            masked_score: MASKED,
        };
        let run = |ours: bool| {
            let (q, k, v) = (
                q.clone().require_grad(),
                k.clone().require_grad(),
                v.clone().require_grad(),
            );
            let out = if ours {
                attend(q.clone(), k.clone(), v.clone(), heads, mask.clone())
            } else {
                burns(q.clone(), k.clone(), v.clone(), heads, &mask)
            };
            let grads = (out.clone() * weights.clone()).sum().backward();
            let grad = |x: &Tensor<3>| values(x.grad(&grads).unwrap());
            (values(out), grad(&q), grad(&k), grad(&v))
        };
        let ours = run(true);
        let theirs = run(false);
        let what = if causal {
            "self-attention"
        } else {
            "cross-attention"
        };
        assert_close(&ours.0, &theirs.0, &format!("{what}: output"));
        assert_close(&ours.1, &theirs.1, &format!("{what}: queries' gradient"));
        assert_close(&ours.2, &theirs.2, &format!("{what}: keys' gradient"));
        assert_close(&ours.3, &theirs.3, &format!("{what}: values' gradient"));
        // Padding keys receive nothing: the third sequence's keys past its first.
        let row = features;
        let third = 2 * keys * row;
        assert!(ours.2[third + row..].iter().all(|&g| g == 0.0));
        assert!(ours.3[third + row..].iter().all(|&g| g == 0.0));
        assert!(ours.3[third..third + row].iter().any(|&g| g != 0.0));
    }
}

/// A sequence of one key: every query reads that key's value, whatever the scores.
#[test]
fn one_key_is_read_whole() {
    let device = device();
    let q = Tensor::<3>::from_data(
        TensorData::new(vec![1.0f32, -2.0, 0.5, 3.0], [1, 2, 2]),
        &device,
    );
    let k = Tensor::<3>::from_data(
        TensorData::new(vec![0.3f32, 0.7, 9.0, 9.0], [1, 2, 2]),
        &device,
    );
    let v = Tensor::<3>::from_data(
        TensorData::new(vec![4.0f32, -1.0, 100.0, 100.0], [1, 2, 2]),
        &device,
    );
    let mask = KeyMask {
        keys: vec![1],
        causal: false,
        masked_score: MASKED,
    };
    assert_eq!(values(attend(q, k, v, 1, mask)), vec![4.0, -1.0, 4.0, -1.0]);
}
