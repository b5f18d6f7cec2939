//! The recogniser's sizes and its loss.

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Distribution, Tensor};

use super::{AsrNetworks, AsrShape, Utterances};
use crate::backend::BackendKind;
use crate::checkpoint::new_optimizer;

const MELS: usize = 80;
/// LibriSpeech's characters (26 letters, space, apostrophe) and the two special tokens.
const VOCABULARY: usize = 30;

fn cpu(seed: u64) -> burn::tensor::Device {
    let device = BackendKind::Flex.device().unwrap().autodiff();
    device.seed(seed);
    device
}

/// The analytic count is what the module holds, for the preset tests use and for the
/// seed's size.
#[test]
fn the_parameter_count_is_the_networks_own() {
    let device = cpu(1);
    for (name, shape) in [("tiny", AsrShape::TINY), ("large", AsrShape::LARGE)] {
        let networks = AsrNetworks::new(shape, MELS, VOCABULARY, &device);
        assert_eq!(
            networks.num_params() as u64,
            shape.parameters(MELS, VOCABULARY),
            "{name}"
        );
    }
    let large = AsrShape::LARGE.parameters(MELS, VOCABULARY) as f64 / 1e6;
    assert!((27.0..27.2).contains(&large), "large: {large:.2} M");
}

fn utterances(device: &burn::tensor::Device) -> Utterances {
    let frames = vec![60, 41, 23];
    let longest = frames[0];
    Utterances {
        features: Tensor::random(
            [frames.len(), longest, MELS],
            Distribution::Normal(0.0, 1.0),
            device,
        ),
        frames,
        tokens: vec![vec![4, 5, 6, 7], vec![8, 9], vec![10, 11, 12]],
    }
}

/// The joint loss is finite, CTC's share is reported apart, and a few AdamW steps on one
/// batch lower it (the networks can fit it).
#[test]
fn the_joint_loss_falls_as_the_networks_fit_a_batch() {
    let device = cpu(2);
    let mut networks = AsrNetworks::new(AsrShape::TINY, MELS, VOCABULARY, &device);
    let batch = utterances(&device);
    let mut optimizer = new_optimizer();
    let mut losses = Vec::new();
    for _ in 0..12 {
        let loss = networks.loss(batch.clone(), 0.3, 1);
        let ctc = loss.ctc.clone().into_scalar::<f32>();
        let total = loss.total.clone();
        losses.push(total.clone().into_scalar::<f32>());
        assert!(ctc.is_finite() && ctc > 0.0, "CTC {ctc}");
        let grads = GradientsParams::from_grads(total.backward(), &networks);
        networks = optimizer.step(1e-3, networks, grads);
    }
    assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
    assert!(
        losses[11] < 0.7 * losses[0],
        "the loss falls on a batch it fits: {losses:?}"
    );
}

/// Padding does not change an utterance's loss: the same utterance alone, and beside a
/// longer one, gives the same loss.
#[test]
fn padding_is_left_out_of_the_loss() {
    let device = cpu(3);
    let networks = AsrNetworks::new(AsrShape::TINY, MELS, VOCABULARY, &device).valid();
    let plain = device.clone().without_autodiff();
    let long = Tensor::random([1, 60, MELS], Distribution::Normal(0.0, 1.0), &plain);
    let short = Tensor::random([1, 30, MELS], Distribution::Normal(0.0, 1.0), &plain);
    let alone = Utterances {
        features: short.clone(),
        frames: vec![30],
        tokens: vec![vec![4, 5]],
    };
    let padded_short = Tensor::cat(vec![short, Tensor::zeros([1, 30, MELS], &plain)], 1);
    let together = Utterances {
        features: Tensor::cat(vec![padded_short, long], 0),
        frames: vec![30, 60],
        tokens: vec![vec![4, 5], vec![6, 7, 8]],
    };
    let loss_alone = networks.loss(alone, 0.3, 1).total.into_scalar::<f32>();
    // The pair's loss is the mean of the two utterances' (CTC) and the mean over their
    // tokens (the decoder), so compare the short one's through a pair of itself.
    let twice = Utterances {
        features: Tensor::cat(vec![together.features.clone().narrow(0, 0, 1); 2], 0),
        frames: vec![30, 30],
        tokens: vec![vec![4, 5], vec![4, 5]],
    };
    let loss_twice = networks.loss(twice, 0.3, 1).total.into_scalar::<f32>();
    assert!(
        (loss_alone - loss_twice).abs() <= 1e-4 * loss_alone.abs().max(1.0),
        "alone {loss_alone}, padded to 60 frames {loss_twice}"
    );
}

/// A micro-batch of clips shorter than the subsampling's window (here 3 frames, and one of
/// none) has a finite loss and gradients, the loss of the clips padded with silence to it.
#[test]
fn clips_shorter_than_the_subsampling_are_padded_to_it() {
    let device = cpu(4);
    let networks = AsrNetworks::new(AsrShape::TINY, MELS, VOCABULARY, &device);
    let short = Tensor::random([2, 3, MELS], Distribution::Normal(0.0, 1.0), &device);
    let batch = |features| Utterances {
        features,
        frames: vec![3, 0],
        tokens: vec![vec![4], vec![5, 6]],
    };
    let loss = networks.loss(batch(short.clone()), 0.3, 1).total;
    let value = loss.clone().into_scalar::<f32>();
    assert!(value.is_finite(), "loss {value}");
    let grads = GradientsParams::from_grads(loss.backward(), &networks);
    assert!(!grads.is_empty(), "the short clips reach the parameters");

    let silence = Tensor::zeros([2, AsrShape::MIN_SUBSAMPLED - 3, MELS], &device);
    let padded = Tensor::cat(vec![short, silence], 1);
    let by_hand = networks
        .loss(batch(padded), 0.3, 1)
        .total
        .into_scalar::<f32>();
    assert!(
        (value - by_hand).abs() <= 1e-5 * value.abs().max(1.0),
        "{value} against {by_hand} padded by hand"
    );
}

/// The subsampling in parts of a few utterances (how it runs on a device pool) is the
/// subsampling of the whole micro-batch: the same output and the same gradients.
#[test]
fn the_subsampling_in_parts_is_the_whole_ones() {
    use burn::optim::SgdConfig;

    let device = cpu(4);
    let networks = AsrNetworks::new(AsrShape::TINY, MELS, VOCABULARY, &device);
    let features: Tensor<3> =
        Tensor::random([5, 40, MELS], Distribution::Normal(0.0, 1.0), &device);
    let weights: Tensor<3> = Tensor::random([5, 9, 64], Distribution::Normal(0.0, 1.0), &device);
    let gradient_step = |rows: usize| {
        let out = networks.subsample(features.clone(), rows);
        let values = out.clone().into_data().convert::<f32>();
        let values = values.as_slice::<f32>().unwrap().to_vec();
        let grads =
            GradientsParams::from_grads((out * weights.clone()).sum().backward(), &networks);
        // One SGD step of rate 1 from the same parameters: the parameters differ by the gradients.
        let stepped = SgdConfig::new().init().step(1.0, networks.clone(), grads);
        (values, crate::model::flat_parameters(&stepped))
    };
    let (whole, whole_step) = gradient_step(usize::MAX);
    let (parts, parts_step) = gradient_step(2);
    assert_eq!(whole.len(), 5 * 9 * 64);
    assert!(crate::model::largest_difference(&whole, &parts) <= 1e-5);
    let moved =
        crate::model::largest_difference(&whole_step, &crate::model::flat_parameters(&networks));
    assert!(moved > 1e-3, "the gradients move the parameters: {moved}");
    let apart = crate::model::largest_difference(&whole_step, &parts_step);
    assert!(
        apart <= 1e-5 * moved.max(1.0),
        "parts' gradients {apart} from the whole's"
    );
}
