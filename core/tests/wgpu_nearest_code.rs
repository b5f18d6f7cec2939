//! The fused nearest-code kernel (shaders/, CubeCL) inside the model on wgpu, over Mesa's
//! software Vulkan driver where there is no GPU (`.ci/run` installs it): the nearest codes by
//! an f64 reference, the same codes as the plain tensor path, ties to the lower index, and the
//! same training trajectory.
#![cfg(feature = "wgpu")]

use burn::tensor::{Distribution, Int, Tensor};
use headroom_core::BackendKind;
use headroom_core::checkpoint::new_optimizer;
use headroom_core::memory::MemoryMeter;
use headroom_core::model::Patches;
use headroom_core::model::nearest_code::{fused_on, fused_runs, nearest_codes};
use headroom_core::model::{LayerForms, VqAutoencoderConfig};
use headroom_core::readback::block_on;
use headroom_core::step::{StepSettings, optimizer_step};

fn codes(t: Tensor<1, Int>) -> Vec<i64> {
    t.into_data().convert::<i64>().try_to_vec::<i64>().unwrap()
}

fn floats<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

fn distance(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
        .sum()
}

/// The default model's shape (a micro-batch of 3 patches: 192 positions, 512 codes of 64),
/// positions that are not multiples of the cube (64) and codes that are not of the codebook
/// tile (32), a narrower codebook, and one of a single code.
#[test]
fn the_kernel_picks_the_codes_the_plain_path_picks() {
    let device = BackendKind::Wgpu
        .device()
        .expect("a wgpu adapter (lavapipe in CI)");
    assert!(
        fused_on(&device),
        "the model's quantizer uses the kernel on wgpu"
    );
    for (positions, codes_n, dim) in [
        (192, 512, 64),
        (1, 512, 64),
        (65, 33, 64),
        (200, 100, 7),
        (130, 1, 64),
    ] {
        let latents =
            Tensor::<2>::random([positions, dim], Distribution::Normal(0.0, 1.0), &device);
        let codebook = Tensor::<2>::random([codes_n, dim], Distribution::Normal(0.0, 1.0), &device);
        assert!(fused_runs(&latents, &codebook));
        let fused = codes(nearest_codes(
            latents.clone(),
            codebook.clone(),
            LayerForms::Auto,
        ));
        let plain = codes(nearest_codes(
            latents.clone(),
            codebook.clone(),
            LayerForms::Plain,
        ));
        let z = floats(latents);
        let e = floats(codebook);
        let row = |m: &[f32], i: i64| m[i as usize * dim..(i as usize + 1) * dim].to_vec();
        let mut differ = 0;
        for p in 0..positions {
            let zp = row(&z, p as i64);
            let (f, q) = (fused[p], plain[p]);
            let best = (0..codes_n as i64)
                .map(|c| distance(&zp, &row(&e, c)))
                .fold(f64::INFINITY, f64::min);
            // The kernel's pick is the nearest code, exactly (f64 reference).
            let df = distance(&zp, &row(&e, f));
            assert!(
                df <= best * (1.0 + 1e-6),
                "position {p}: code {f} at {df}, best {best}"
            );
            if f != q {
                // Only a float tie may separate the two forms: the plain path rounds
                // |z|^2 - 2 z.e + |e|^2, the kernel sums squared differences.
                let dq = distance(&zp, &row(&e, q));
                assert!(
                    (df - dq).abs() <= 1e-5 * best.max(1.0),
                    "position {p}: {f} vs {q}"
                );
                differ += 1;
            }
        }
        assert!(
            differ * 100 <= positions,
            "{differ} of {positions} positions differ"
        );
    }
}

/// Two equal codes in different tiles (of 32 codes): every position takes the lower index,
/// as argmin does.
#[test]
fn a_tie_goes_to_the_lower_index() {
    let device = BackendKind::Wgpu
        .device()
        .expect("a wgpu adapter (lavapipe in CI)");
    let dim = 64;
    let codebook = Tensor::<2>::random([40, dim], Distribution::Normal(0.0, 1.0), &device);
    let (low, high) = (3, 35);
    let code = codebook.clone().narrow(0, low, 1);
    let codebook = codebook.slice_assign([high..high + 1, 0..dim], code.clone());
    let latents = code.repeat_dim(0, 70);
    assert!(fused_runs(&latents, &codebook));
    let found = codes(nearest_codes(latents, codebook, LayerForms::Auto));
    assert_eq!(found, vec![low as i64; 70]);
}

/// Three optimizer steps from one initialisation on the same batches: the kernel path and
/// the plain path lose the same, step by step.
#[test]
fn the_kernel_path_trains_like_the_plain_path() {
    let device = BackendKind::Wgpu
        .training_device(None, false)
        .expect("a wgpu adapter (lavapipe in CI)");
    device.seed(11);
    let batches: Vec<Tensor<4>> = (0..3)
        .map(|_| Tensor::random([8, 1, 64, 64], Distribution::Normal(0.0, 1.0), &device))
        .collect();
    // Codes drawn from the encoder's own outputs, as training starts (8 patches give the
    // 512 codes): the initial codes all sit near zero, where any choice decodes alike.
    let init = VqAutoencoderConfig::default().init(&device);
    let latents = init
        .encode(batches[0].clone())
        .detach()
        .permute([0, 2, 3, 1])
        .reshape([512, 64]);
    let init = init.set_codebook(latents);
    let run = |forms: LayerForms| {
        let mut model = init.clone().with_forms(forms);
        let mut optimizer = new_optimizer();
        let mut meter = MemoryMeter::new(BackendKind::Wgpu, &device);
        let mut losses = Vec::new();
        for batch in &batches {
            let settings = StepSettings {
                step_examples: 8,
                lr: 1e-3,
                clip_norm: Some(1.0),
                warming_up: false,
                precision: Default::default(),
            };
            let (next, report) = block_on(optimizer_step(
                &VqAutoencoderConfig::default(),
                model,
                &mut optimizer,
                [Patches::unlabelled(batch.clone())],
                settings,
                &mut meter,
            ))
            .unwrap();
            model = next;
            losses.push(report.first().loss);
        }
        losses
    };
    let fused = run(LayerForms::Auto);
    let plain = run(LayerForms::Plain);
    assert_eq!(fused.len(), 3);
    for (step, (f, p)) in fused.iter().zip(&plain).enumerate() {
        assert!(f.is_finite() && *f > 0.0, "step {step}: loss {f}");
        assert!((f - p).abs() <= 1e-4 * p.abs(), "step {step}: {f} vs {p}");
    }
}
