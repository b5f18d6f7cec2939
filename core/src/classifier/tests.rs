//! The classifier's networks hold what their counts say, a step split into micro-batches
//! steps both classifiers as the whole step does, and the draws are the stream's.

use burn::module::Module;
use std::path::PathBuf;

use super::data::{Draws, draws_of};
use super::*;
use crate::BackendKind;
use crate::memory::MemoryMeter;
use crate::model::flat_parameters;
use crate::readback::block_on;
use crate::step::{StepSettings, optimizer_step};

fn with_generator(arch: ClassifierArch, patch: PatchShape) -> ClassifierConfig {
    ClassifierConfig {
        arch,
        patch,
        generated: Some(GeneratedPatches {
            shape: GanShape {
                mels: patch.mels,
                frames: patch.frames,
                latent: 8,
                width: 4,
            },
            ..GeneratedPatches::from(PathBuf::from("gan-run"), 0.5)
        }),
        ..ClassifierConfig::default()
    }
}

#[test]
fn the_parameter_count_is_what_the_classifiers_hold() {
    let device = BackendKind::Flex.device().unwrap();
    let narrow = PatchShape {
        mels: 64,
        frames: 32,
    };
    for arch in [ClassifierArch::Vit, ClassifierArch::Cnn] {
        for patch in [PatchShape::SQUARE_64, narrow] {
            let alone = ClassifierConfig {
                arch,
                patch,
                ..ClassifierConfig::default()
            };
            let networks = alone.networks(&device);
            assert_eq!(
                networks.num_params() as u64,
                alone.parameters(),
                "{arch:?} {patch:?}"
            );
            assert!(networks.mixed.is_none() && networks.generator.is_none());
            // Beside a generator: two classifiers counted, the frozen generator not.
            let side_by_side = with_generator(arch, patch);
            let networks = side_by_side.networks(&device);
            let generator = networks.generator.as_ref().map_or(0, |g| g.num_params());
            assert!(generator > 0);
            assert_eq!(
                (networks.num_params() - generator) as u64,
                side_by_side.parameters()
            );
            assert_eq!(side_by_side.parameters(), 2 * alone.parameters());
        }
    }
}

#[test]
fn a_step_cut_into_micro_batches_steps_both_classifiers_as_the_whole_step() {
    for arch in [ClassifierArch::Vit, ClassifierArch::Cnn] {
        let device = BackendKind::Flex.device().unwrap().autodiff();
        device.seed(3);
        let task = with_generator(
            arch,
            PatchShape {
                mels: 64,
                frames: 32,
            },
        );
        assert_eq!(task.phases(), ["real", "real + generated"]);
        let start = task.networks(&device);
        let whole = task.measuring_batch(8, &device);
        let settings = StepSettings {
            step_examples: 8,
            lr: 0.1,
            clip_norm: Some(1.0),
            warming_up: false,
            precision: crate::precision::Precision::F32,
        };
        let step = |batches| {
            let mut meter = MemoryMeter::new(BackendKind::Flex, &device);
            block_on(optimizer_step(
                &task,
                start.clone(),
                // Plain SGD: Adam's first step moves each parameter by the learning rate
                // whatever its gradient's size, so a gradient of float noise alone would
                // move as far as a real one and hide whether the two steps agree.
                &mut burn::optim::SgdConfig::new().init(),
                batches,
                settings,
                &mut meter,
            ))
            .unwrap()
            .0
        };
        let one = step(vec![whole.clone()]);
        let cut = step(task.recut(&[whole], &[3, 3, 2]).unwrap());
        for (name, a, b) in [
            (
                "real",
                flat_parameters(&one.real),
                flat_parameters(&cut.real),
            ),
            (
                "real + generated",
                one.mixed.as_ref().map(flat_parameters).unwrap(),
                cut.mixed.as_ref().map(flat_parameters).unwrap(),
            ),
        ] {
            let worst = a
                .iter()
                .zip(&b)
                .map(|(p, q)| (p - q).abs() / p.abs().max(1e-3))
                .fold(0.0f32, f32::max);
            assert!(worst <= 1e-5, "{arch:?} {name}: largest difference {worst}");
        }
        // The generator is frozen: no step moves it.
        let frozen = |n: &ClassifierNetworks| n.generator.as_ref().map(flat_parameters).unwrap();
        assert_eq!(frozen(&one), frozen(&start), "{arch:?}");
        assert_ne!(
            flat_parameters(&one.real),
            flat_parameters(&start.real),
            "{arch:?}: the real-data classifier did not move"
        );
    }
}

#[test]
fn a_patches_draw_is_the_streams_and_replaces_about_the_share() {
    let draws = Draws {
        latent: 4,
        share: 0.25,
    };
    assert_eq!(draws_of(7, 12, 3, draws), draws_of(7, 12, 3, draws));
    assert_ne!(draws_of(7, 12, 3, draws), draws_of(7, 13, 3, draws));
    let (mut replaced, mut n) = (0.0, 0);
    for position in 0..2000 {
        let (r, noise) = draws_of(7, position, 4, draws);
        assert_eq!((r.len(), noise.len()), (4, 16));
        assert!(r.iter().all(|&v| v == 0.0 || v == 1.0));
        replaced += r.iter().sum::<f32>();
        n += r.len();
    }
    let share = replaced / n as f32;
    assert!((share - 0.25).abs() < 0.02, "replaced {share}");
}
