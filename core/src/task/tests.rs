//! The seam holds what each kind of training needs: the built-in models step through it as
//! a plain step of one network would, a task of two networks steps each with its own
//! gradients in order, and a task whose loss couples its examples is never accumulated.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Distribution, Gradients, Tensor, activation};

use super::{Coupling, StepContext, TrainingTask};
use crate::backend::BackendKind;
use crate::checkpoint::new_optimizer;
use crate::memory::MemoryMeter;
use crate::model::{
    AnalyticStep, DcaseAeConfig, IdClassifierConfig, ModelConfig, SpectrogramModel, StepLoss,
    VqAutoencoderConfig, flat_parameters,
};
use crate::plan::{self, Fixed, Planning, PlanningError, RunShare};
use crate::precision::Precision;
use crate::readback::block_on;
use crate::step::{StepError, StepSettings, clip_global_norm, optimizer_step, phased_step};

fn autodiff_cpu(seed: u64) -> Device {
    let device = BackendKind::Flex.device().unwrap().autodiff();
    device.seed(seed);
    device
}

fn settings(step_examples: usize, clip_norm: Option<f64>) -> StepSettings {
    StepSettings {
        step_examples,
        lr: 1e-3,
        clip_norm,
        warming_up: false,
        precision: Precision::F32,
    }
}

fn assert_close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: sizes");
    let worst = a
        .iter()
        .zip(b)
        .map(|(p, q)| (p - q).abs() / p.abs().max(1e-3))
        .fold(0.0f32, f32::max);
    assert!(worst <= 1e-5, "{what}: largest relative difference {worst}");
}

/// Three steps of a built-in model through the seam, against the same steps written out
/// as one network's step was before the seam: the loss, backward, every gradient, global
/// clipping, AdamW. Same losses, same parameters.
fn steps_as_before<C: ModelConfig>(config: C) {
    let device = autodiff_cpu(5);
    let start = config.init(&device);
    let batches: Vec<_> = (0..3).map(|_| config.measuring_batch(6, &device)).collect();
    let mut meter = MemoryMeter::new(BackendKind::Flex, &device);

    let (mut seam, mut seam_optimizer) = (start.clone(), new_optimizer());
    let mut seam_losses = Vec::new();
    for batch in &batches {
        let (next, outcome) = block_on(optimizer_step(
            &config,
            seam,
            &mut seam_optimizer,
            [batch.clone()],
            settings(6, Some(1.0)),
            &mut meter,
        ))
        .unwrap();
        assert_eq!(outcome.phases.len(), 1);
        seam_losses.push(outcome.first().loss);
        seam = next;
    }

    let (mut plain, mut plain_optimizer): (C::Model, ModuleOptimizer) = (start, new_optimizer());
    let mut plain_losses = Vec::new();
    for batch in &batches {
        let loss = plain.loss(batch.clone(), Precision::F32, false).total;
        let grads = loss.backward();
        plain_losses.push(loss.into_scalar::<f32>() as f64);
        let mut grads = GradientsParams::from_grads(grads, &plain);
        block_on(clip_global_norm(&plain, &mut grads, 1.0)).unwrap();
        plain = plain_optimizer.step(1e-3, plain, grads);
    }

    let name = C::NAME;
    let losses = |v: &[f64]| v.iter().map(|l| *l as f32).collect::<Vec<_>>();
    assert_close(&losses(&plain_losses), &losses(&seam_losses), name);
    assert_close(&flat_parameters(&plain), &flat_parameters(&seam), name);
    assert_ne!(
        flat_parameters(&config.init(&device)).len(),
        0,
        "{name} has parameters"
    );
}

#[test]
fn the_default_model_steps_through_the_seam_as_before() {
    steps_as_before(VqAutoencoderConfig::default());
}

#[test]
fn the_dcase_baseline_steps_through_the_seam_as_before() {
    steps_as_before(DcaseAeConfig::default());
}

#[test]
fn the_id_classifier_steps_through_the_seam_as_before() {
    steps_as_before(IdClassifierConfig::default());
}

/// Two small networks trained in turn, as a GAN's discriminator and generator are: each
/// phase's loss reaches both networks, and only its own network learns from it.
#[derive(Module, Debug)]
struct Pair {
    first: Linear,
    second: Linear,
}

#[derive(Debug, Clone)]
struct TwoPhases;

impl TwoPhases {
    fn loss_of(pair: &Pair, phase: usize, x: Tensor<2>) -> Tensor<1> {
        let (a, b) = (pair.first.forward(x.clone()), pair.second.forward(x));
        let joint = match phase {
            0 => a + b,
            _ => a - b - 1.0,
        };
        joint.square().mean()
    }

    fn own_gradients(pair: &Pair, phase: usize, mut grads: Gradients) -> GradientsParams {
        match phase {
            0 => GradientsParams::from_module(&mut grads, &pair.first),
            _ => GradientsParams::from_module(&mut grads, &pair.second),
        }
    }
}

impl TrainingTask for TwoPhases {
    type Networks = Pair;
    type Batch = Tensor<2>;

    fn phases(&self) -> &'static [&'static str] {
        &["first", "second"]
    }
    fn networks(&self, device: &Device) -> Pair {
        Pair {
            first: LinearConfig::new(4, 1).init(device),
            second: LinearConfig::new(4, 1).init(device),
        }
    }
    fn examples_in(&self, batch: &Tensor<2>) -> usize {
        batch.dims()[0]
    }
    fn measuring_batch(&self, examples: usize, device: &Device) -> Tensor<2> {
        Tensor::random([examples, 4], Distribution::Normal(0.0, 1.0), device)
    }
    fn loss(&self, pair: &Pair, phase: usize, x: Tensor<2>, _: StepContext) -> StepLoss {
        let total = Self::loss_of(pair, phase, x);
        StepLoss {
            reported: total.clone(),
            total,
        }
    }
    fn phase_gradients(&self, pair: &Pair, phase: usize, grads: Gradients) -> GradientsParams {
        Self::own_gradients(pair, phase, grads)
    }
    fn parameters(&self) -> u64 {
        10
    }
    fn step_memory(&self, _: BackendKind, _: Precision, examples: usize) -> AnalyticStep {
        AnalyticStep {
            parameters: 40,
            activations: 8 * examples as u64,
            data: 16 * examples as u64,
        }
    }
}

#[test]
fn each_phase_updates_its_own_network_after_the_phases_before_it() {
    let device = autodiff_cpu(9);
    let task = TwoPhases;
    let start = task.networks(&device);
    let x = task.measuring_batch(8, &device);
    let mut meter = MemoryMeter::new(BackendKind::Flex, &device);
    // Two micro-batches of 4: each phase sums both before its update.
    let halves = [x.clone().narrow(0, 0, 4), x.clone().narrow(0, 4, 4)];
    let mut optimizer = new_optimizer();
    let (stepped, outcome) = block_on(optimizer_step(
        &task,
        start.clone(),
        &mut optimizer,
        halves,
        settings(8, None),
        &mut meter,
    ))
    .unwrap();
    assert_eq!(outcome.phases.len(), 2);

    // By hand: the first network's update from the first loss; then the second's from the
    // second loss with the first already updated. Separate optimizers, as two networks
    // would have.
    let lr = 1e-3;
    let grads = TwoPhases::loss_of(&start, 0, x.clone()).backward();
    let first = new_optimizer().step(
        lr,
        start.first.clone(),
        TwoPhases::own_gradients(&start, 0, grads),
    );
    let between = Pair {
        first,
        second: start.second.clone(),
    };
    let grads = TwoPhases::loss_of(&between, 1, x).backward();
    let second = new_optimizer().step(
        lr,
        between.second.clone(),
        TwoPhases::own_gradients(&between, 1, grads),
    );

    assert_close(
        &flat_parameters(&between.first),
        &flat_parameters(&stepped.first),
        "first network",
    );
    assert_close(
        &flat_parameters(&second),
        &flat_parameters(&stepped.second),
        "second network",
    );
    assert_ne!(
        flat_parameters(&start.second),
        flat_parameters(&stepped.second),
        "the second network learned"
    );
}

/// Each phase may cut the step's examples its own way: the first phase in one micro-batch
/// of 8, the second in four of 2, steps as both phases in two of 4 do (each phase's
/// gradient is the mean over the whole step whatever its micro-batches).
#[test]
fn each_phase_cuts_the_step_its_own_way_and_steps_the_same() {
    let device = autodiff_cpu(11);
    let task = TwoPhases;
    let start = task.networks(&device);
    let x = task.measuring_batch(8, &device);
    let cut = |size: usize| -> Vec<Tensor<2>> {
        (0..8 / size)
            .map(|i| x.clone().narrow(0, i * size, size))
            .collect()
    };
    let mut meter = MemoryMeter::new(BackendKind::Flex, &device);
    let (shared, _) = block_on(optimizer_step(
        &task,
        start.clone(),
        &mut new_optimizer(),
        cut(4),
        settings(8, Some(1.0)),
        &mut meter,
    ))
    .unwrap();
    let sizes = [8, 2];
    let mut asked = Vec::new();
    let (phased, outcome) = block_on(phased_step(
        &task,
        start,
        &mut new_optimizer(),
        |phase| {
            asked.push(phase);
            cut(sizes[phase])
        },
        settings(8, Some(1.0)),
        &mut meter,
    ))
    .unwrap();
    assert_eq!(asked, [0, 1], "each phase's micro-batches, in order");
    assert_eq!(outcome.phases.len(), 2);
    assert_close(
        &flat_parameters(&shared),
        &flat_parameters(&phased),
        "both networks",
    );
    // A phase given fewer examples than the step's is refused, and the first phase's
    // update is not kept: the optimizer then steps as a fresh one does.
    let again = task.networks(&device);
    let mut optimizer = new_optimizer();
    let short = block_on(phased_step(
        &task,
        again.clone(),
        &mut optimizer,
        |phase| {
            if phase == 0 {
                cut(8)
            } else {
                cut(2)[..3].to_vec()
            }
        },
        settings(8, None),
        &mut meter,
    ));
    let failed = short.expect_err("a short phase is refused");
    assert_eq!(failed.phase(), Some(1), "{failed}");
    assert!(
        matches!(
            failed.cause(),
            StepError::Incomplete {
                seen: 6,
                expected: 8
            }
        ),
        "{failed:?}"
    );
    let step_with = |mut optimizer: ModuleOptimizer, meter: &mut MemoryMeter| {
        let (stepped, _) = block_on(optimizer_step(
            &task,
            again.clone(),
            &mut optimizer,
            cut(8),
            settings(8, None),
            meter,
        ))
        .unwrap();
        flat_parameters(&stepped)
    };
    assert_eq!(
        step_with(optimizer, &mut meter),
        step_with(new_optimizer(), &mut meter),
        "the refused step left the optimizer as it was"
    );
}

/// In-batch negatives: each example's positive is itself, every other example of the step
/// a negative, so the loss of half a step is not half the loss of the step.
#[derive(Debug, Clone)]
struct InBatchNegatives;

/// Values per example: wide enough that calibration's sizes (which hold a fixed number of
/// bytes per step) stay a few hundred examples, whose similarity matrix is small.
const WIDTH: usize = 4096;

impl TrainingTask for InBatchNegatives {
    type Networks = Linear;
    type Batch = Tensor<2>;

    fn phases(&self) -> &'static [&'static str] {
        &["encoder"]
    }
    fn coupling(&self) -> Coupling {
        Coupling::WholeStep
    }
    fn networks(&self, device: &Device) -> Linear {
        LinearConfig::new(WIDTH, 3).init(device)
    }
    fn examples_in(&self, batch: &Tensor<2>) -> usize {
        batch.dims()[0]
    }
    fn measuring_batch(&self, examples: usize, device: &Device) -> Tensor<2> {
        Tensor::random([examples, WIDTH], Distribution::Normal(0.0, 1.0), device)
    }
    fn loss(&self, encoder: &Linear, _: usize, x: Tensor<2>, _: StepContext) -> StepLoss {
        let n = x.dims()[0];
        let z = encoder.forward(x);
        let similarity = z.clone().matmul(z.transpose());
        let log_p = activation::log_softmax(similarity, 1);
        let diagonal = Tensor::<2>::eye(n, &log_p.device());
        let total = (log_p * diagonal)
            .sum()
            .neg()
            .div_scalar(n as f32)
            .reshape([1]);
        StepLoss {
            reported: total.clone(),
            total,
        }
    }
    fn parameters(&self) -> u64 {
        (WIDTH * 3 + 3) as u64
    }
    fn step_memory(&self, _: BackendKind, _: Precision, examples: usize) -> AnalyticStep {
        AnalyticStep {
            parameters: 4 * self.parameters(),
            activations: 12 * examples as u64 + 4 * (examples * examples) as u64,
            data: 4 * (WIDTH * examples) as u64,
        }
    }
}

#[test]
fn a_coupled_step_is_one_micro_batch() {
    let device = autodiff_cpu(3);
    let task = InBatchNegatives;
    let x = task.measuring_batch(8, &device);
    let mut meter = MemoryMeter::new(BackendKind::Flex, &device);
    let mut optimizer = new_optimizer();
    let whole = block_on(optimizer_step(
        &task,
        task.networks(&device),
        &mut optimizer,
        [x.clone()],
        settings(8, Some(1.0)),
        &mut meter,
    ));
    assert!(whole.is_ok(), "{:?}", whole.err());
    let split = block_on(optimizer_step(
        &task,
        task.networks(&device),
        &mut optimizer,
        [x.clone().narrow(0, 0, 4), x.narrow(0, 4, 4)],
        settings(8, Some(1.0)),
        &mut meter,
    ));
    assert!(matches!(split, Err(StepError::Coupled)), "{split:?}");
}

#[test]
fn the_planner_never_accumulates_a_coupled_step() {
    let task = InBatchNegatives;
    let target = BackendKind::Flex.into();
    let defaults = crate::model::DefaultBatch {
        spectrograms: 32,
        patches: 1,
    };
    let open = Fixed {
        n_patches: Some(1),
        ..Fixed::default()
    };
    // A budget that a step of 32 fits easily: the plan is one micro-batch of 32.
    let planning = Planning::new(1 << 30, Some(32), open, defaults).unwrap();
    let planned = block_on(plan::unchecked(
        target,
        &task,
        &planning,
        RunShare::default(),
    ))
    .unwrap();
    assert_eq!(planned.plan.accumulation, 1);
    assert_eq!(planned.plan.micro_batch, 32);

    let asked = Fixed {
        accumulation: Some(4),
        ..open
    };
    let planning = Planning::new(1 << 30, Some(32), asked, defaults).unwrap();
    let refused = block_on(plan::unchecked(
        target,
        &task,
        &planning,
        RunShare::default(),
    ));
    assert!(
        matches!(refused, Err(PlanningError::Coupled { accumulation: 4 })),
        "{refused:?}"
    );
}
