use super::*;
use crate::backend::BackendKind;
use crate::model::{Patches, VqAutoencoder, VqAutoencoderConfig};
use crate::readback::block_on;
use burn::tensor::Distribution;

fn flatten(model: &VqAutoencoder, grads: &GradientsParams) -> Vec<f32> {
    struct Collect<'a> {
        grads: &'a GradientsParams,
        out: Vec<f32>,
    }
    impl ModuleVisitor for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let g = self
                .grads
                .get::<D>(param.id)
                .expect("every parameter has a gradient");
            self.out.extend(g.into_data().try_to_vec::<f32>().unwrap());
        }
    }
    let mut c = Collect {
        grads,
        out: Vec::new(),
    };
    model.visit(&mut c);
    c.out
}

fn context(precision: Precision) -> StepContext {
    StepContext {
        precision,
        warming_up: false,
    }
}

fn setup() -> (VqAutoencoder, Patches, MemoryMeter) {
    let device = BackendKind::Flex.device().unwrap().autodiff();
    device.seed(11);
    let model = VqAutoencoderConfig::default().init(&device);
    let x = Tensor::<4>::random([8, 1, 64, 64], Distribution::Normal(0.0, 1.0), &device);
    let meter = MemoryMeter::new(BackendKind::Flex, &device);
    (model, Patches::unlabelled(x), meter)
}

/// One batch of 8, four micro-batches of 2, and uneven ones of 3, 3 and 2 give the same
/// gradient and loss.
#[test]
fn accumulation_matches_the_whole_batch() {
    let (model, x, mut meter) = setup();
    let (whole, loss_whole, _) = block_on(accumulate_gradients(
        &VqAutoencoderConfig::default(),
        &model,
        0,
        [x.clone()],
        8,
        context(Precision::F32),
        &mut meter,
    ))
    .unwrap();
    let a = flatten(&model, &whole);
    assert_eq!(a.len(), 392_193);
    let scale = a.iter().map(|v| v.abs()).fold(0.0f32, f32::max);
    for sizes in [vec![2, 2, 2, 2], vec![3, 3, 2]] {
        let mut start = 0;
        let parts: Vec<_> = sizes
            .iter()
            .map(|&n| {
                let part = x.values.clone().narrow(0, start, n);
                start += n;
                Patches::unlabelled(part)
            })
            .collect();
        let (accumulated, loss_parts, _) = block_on(accumulate_gradients(
            &VqAutoencoderConfig::default(),
            &model,
            0,
            parts,
            8,
            context(Precision::F32),
            &mut meter,
        ))
        .unwrap();
        let b = flatten(&model, &accumulated);
        let worst = a
            .iter()
            .zip(&b)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst <= 1e-4 * scale.max(1e-3),
            "{sizes:?}: largest gradient difference {worst} (scale {scale})"
        );
        assert!(
            (loss_whole - loss_parts).abs() < 1e-4 * loss_whole.abs().max(1.0),
            "{sizes:?}: loss {loss_parts} vs {loss_whole}"
        );
    }
}

/// Mixed precision (f16 and bf16 compute, f32 parameters) gives nearly the gradient of
/// f32, once the loss scale is undone.
#[test]
fn a_step_short_of_its_patches_is_refused() {
    let (model, x, mut meter) = setup();
    let short = block_on(accumulate_gradients(
        &VqAutoencoderConfig::default(),
        &model,
        0,
        [x],
        16,
        context(Precision::F32),
        &mut meter,
    ));
    assert!(matches!(
        short,
        Err(StepError::Incomplete {
            seen: 8,
            expected: 16
        })
    ));
}

#[test]
fn half_precision_gradients_follow_the_f32_ones() {
    let (model, x, mut meter) = setup();
    let run = |precision: Precision, meter: &mut MemoryMeter| {
        let (mut grads, loss, _) = block_on(accumulate_gradients(
            &VqAutoencoderConfig::default(),
            &model,
            0,
            [x.clone()],
            8,
            context(precision),
            meter,
        ))
        .unwrap();
        scale_gradients(&model, &mut grads, 1.0 / precision.loss_scale());
        (flatten(&model, &grads), loss)
    };
    let (full, loss_full) = run(Precision::F32, &mut meter);
    for precision in [Precision::F16, Precision::Bf16] {
        let (half, loss_half) = run(precision, &mut meter);
        let dot: f64 = full
            .iter()
            .zip(&half)
            .map(|(a, b)| *a as f64 * *b as f64)
            .sum();
        let norm = |v: &[f32]| v.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
        let cosine = dot / (norm(&full) * norm(&half));
        assert!(cosine > 0.99, "{precision}: cosine {cosine}");
        let ratio = norm(&half) / norm(&full);
        assert!(
            (ratio - 1.0).abs() < 0.05,
            "{precision}: norm ratio {ratio}"
        );
        assert!(
            (loss_half - loss_full).abs() < 0.02 * loss_full.abs(),
            "{precision}: loss {loss_half} vs {loss_full}"
        );
    }
}

#[test]
fn clipping_bounds_the_global_norm_and_keeps_the_direction() {
    let (model, x, mut meter) = setup();
    let (grads, _, _) = block_on(accumulate_gradients(
        &VqAutoencoderConfig::default(),
        &model,
        0,
        [Patches::unlabelled(x.values.mul_scalar(50.0))],
        8,
        context(Precision::F32),
        &mut meter,
    ))
    .unwrap();
    let before = flatten(&model, &grads);
    let norm = block_on(global_norm(&model, &grads)).unwrap();
    let direct = before
        .iter()
        .map(|v| (*v as f64).powi(2))
        .sum::<f64>()
        .sqrt();
    assert!((norm - direct).abs() <= 1e-3 * direct, "{norm} vs {direct}");
    let max_norm = norm / 4.0;
    let mut clipped = grads;
    let reported = block_on(clip_global_norm(&model, &mut clipped, max_norm)).unwrap();
    assert!((reported - norm).abs() < 1e-9);
    let after = flatten(&model, &clipped);
    let after_norm = block_on(global_norm(&model, &clipped)).unwrap();
    assert!(
        (after_norm - max_norm).abs() <= 1e-3 * max_norm,
        "{after_norm} vs {max_norm}"
    );
    for (a, b) in before.iter().zip(&after).step_by(997) {
        assert!(
            (a * 0.25 - b).abs() <= 1e-3 * a.abs().max(1e-6),
            "{a} -> {b}"
        );
    }
    // Below the threshold nothing changes.
    let mut again = clipped;
    block_on(clip_global_norm(&model, &mut again, max_norm * 10.0)).unwrap();
    assert_eq!(flatten(&model, &again), after);
}

/// cubecl's words when a buffer passes the device's largest (the 2 GiB buffer a 256 x 16
/// patch step asked of lavapipe, whose largest is 128 MiB), and when the driver ran out:
/// both are refusals that a smaller micro-batch answers; a poisoned device is not.
#[test]
fn the_devices_refusal_is_told_in_one_line() {
    let too_big = StepError::Device(
        "An error happened during execution\nCaused by:\n  Several failures at once\n\
         Caused by:\n  The bytes were never written (failure #36, still claiming 3 \
         buffer(s))\n  skipped `ReduceKernel`: it needed memory ManagedMemoryId { value: \
         131 }, which carried the failure\nCaused by:\n  An IO error happened\n\
         Caused by:\n  can't allocate buffer of size: 2147483648\nNo backtrace available"
            .into(),
    );
    assert_eq!(
        too_big.device_refusal().as_deref(),
        Some("a buffer of 2.00 GiB is larger than the device's largest")
    );
    let out = StepError::Device(
        "An IO error happened\nCaused by:\n  out of device memory allocating 1024 bytes".into(),
    );
    assert_eq!(
        out.device_refusal().as_deref(),
        Some("out of device memory allocating 1024 bytes")
    );
    let poisoned = StepError::Device("the device is poisoned by an earlier allocation".into());
    assert_eq!(poisoned.device_refusal(), None);
    assert_eq!(StepError::Coupled.device_refusal(), None);
}
