//! The host CTC against burn's own (the generic CTC of tensor ops, differentiated by
//! autodiff) and against a case worked by hand.

use burn::nn::loss::CTCLossConfig;
use burn::tensor::activation::log_softmax;
use burn::tensor::{Distribution, Int, Tensor, TensorData};

use super::super::{assert_close, values};
use super::{CtcTargets, loss};
use crate::backend::BackendKind;

const BLANK: usize = 0;

fn device() -> burn::tensor::Device {
    BackendKind::Flex.device().unwrap().autodiff()
}

fn ints<const D: usize>(values: Vec<i64>, shape: [usize; D]) -> Tensor<D, Int> {
    Tensor::from_data(TensorData::new(values, shape), &device())
}

/// burn's CTC with `zero_infinity`, as the recogniser used it before this kernel.
fn burns(log_probs: Tensor<3>, targets: &CtcTargets) -> Tensor<1> {
    let n = targets.labels.len();
    let width = targets
        .labels
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(0)
        .max(1);
    let padded: Vec<i64> = targets
        .labels
        .iter()
        .flat_map(|l| (0..width).map(|i| l.get(i).map_or(1, |&v| v as i64)))
        .collect();
    CTCLossConfig::new()
        .with_blank(targets.blank)
        .with_zero_infinity(true)
        .init()
        .forward(
            log_probs.swap_dims(0, 1),
            ints(padded, [n, width]),
            ints(targets.frames.iter().map(|&f| f as i64).collect(), [n]),
            ints(targets.labels.iter().map(|l| l.len() as i64).collect(), [n]),
        )
}

/// Losses and the logits' gradients of a weighted sum of them equal burn's, over
/// utterances of several lengths (shorter than the padding too), repeated labels that need
/// a blank between them, an empty transcript, and one that its frames cannot hold; for an
/// unsure network and for a confident one, whose improbable labels are far under f32's
/// least probability (burn computes in log space, this kernel in scaled probabilities).
#[test]
fn losses_and_gradients_equal_burns_ctc() {
    for spread in [2.0, 40.0] {
        equal_to_burns(spread);
    }
}

fn equal_to_burns(spread: f64) {
    let device = device();
    device.seed(7);
    let targets = CtcTargets {
        labels: vec![vec![1, 1, 2], vec![3], vec![2, 4, 4, 1], vec![], vec![5, 5]],
        frames: vec![12, 9, 5, 4, 2],
        blank: BLANK,
    };
    let logits = Tensor::<3>::random([5, 12, 6], Distribution::Normal(0.0, spread), &device);
    // Weights per utterance, so that each one's gradient is scaled apart.
    let weights = Tensor::<1>::from_data(
        TensorData::new(vec![1.0f32, 0.5, 2.0, 1.5, 3.0], [5]),
        &device,
    );
    let run = |ours: bool| {
        let x = logits.clone().require_grad();
        let log_probs = log_softmax(x.clone(), 2);
        let losses = if ours {
            loss(log_probs, targets.clone())
        } else {
            burns(log_probs, &targets)
        };
        let grads = (losses.clone() * weights.clone()).sum().backward();
        (values(losses), values(x.grad(&grads).unwrap()))
    };
    let (our_losses, our_grad) = run(true);
    let (their_losses, their_grad) = run(false);
    assert_close(&our_losses, &their_losses, "loss");
    assert_eq!(
        our_losses[4], 0.0,
        "two repeated labels in two frames cannot align: zero, as zero_infinity makes it"
    );
    assert!(our_losses[..4].iter().all(|&l| l > 0.0), "{our_losses:?}");
    assert_close(&our_grad, &their_grad, "gradient");
    // Nothing past an utterance's frames, nothing for the unalignable one.
    let row = 12 * 6;
    assert!(our_grad[2 * row + 5 * 6..3 * row].iter().all(|&g| g == 0.0));
    assert!(our_grad[4 * row..].iter().all(|&g| g == 0.0));
}

/// Two frames, one label `a`, blank `b`: the paths a a, a b and b a.
#[test]
fn two_frames_one_label_sum_their_three_paths() {
    let device = device();
    let p = [[0.5f32, 0.3, 0.2], [0.1, 0.6, 0.3]];
    let log_probs = Tensor::<3>::from_data(
        TensorData::new(p.iter().flatten().map(|v| v.ln()).collect(), [1, 2, 3]),
        &device,
    );
    let targets = CtcTargets {
        labels: vec![vec![1]],
        frames: vec![2],
        blank: BLANK,
    };
    let (a, b) = (1, BLANK);
    let likelihood = p[0][a] * p[1][a] + p[0][a] * p[1][b] + p[0][b] * p[1][a];
    let got = values(loss(log_probs, targets))[0];
    assert!(
        (got + likelihood.ln()).abs() < 1e-6,
        "{got} against {}",
        -likelihood.ln()
    );
}
