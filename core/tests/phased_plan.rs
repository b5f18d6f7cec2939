//! A task of two phases whose memory per example differs (as a GAN's discriminator and
//! generator do) is planned phase by phase: each phase gets the largest micro-batch its own
//! peak allows within the budget, both keep the effective batch, and the dry-run measures
//! each phase's peak against its own prediction.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Distribution, Gradients, Tensor};

use headroom_core::BackendKind;
use headroom_core::events::{Event, EventSink};
use headroom_core::memory::MemoryMeter;
use headroom_core::memory::alloc::CountingAllocator;
use headroom_core::model::{AnalyticStep, StepLoss};
use headroom_core::plan::{self, Fixed, Planning, RunShare};
use headroom_core::precision::Precision;
use headroom_core::readback::block_on;
use headroom_core::task::{StepContext, TrainingTask};

// The planner reads host memory on flex, so this binary counts allocations (and has one
// test, so no other test's allocations are measured with it).
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator(std::alloc::System);

/// Features per example.
const FEATURES: usize = 64;
/// Values the heavy phase holds per example for its backward: a wide hidden layer.
const WIDE: usize = 8192;

#[derive(Module, Debug)]
struct Heavy {
    input: Linear,
    output: Linear,
}

#[derive(Module, Debug)]
struct Networks {
    light: Linear,
    heavy: Heavy,
}

/// Phase `light` trains one small layer; phase `heavy` trains a wide two-layer network,
/// whose hidden activations (WIDE values per example) dominate its peak.
#[derive(Debug, Clone)]
struct UnevenPhases;

impl TrainingTask for UnevenPhases {
    type Networks = Networks;
    type Batch = Tensor<2>;

    fn phases(&self) -> &'static [&'static str] {
        &["light", "heavy"]
    }
    fn cut_into_patches(&self) -> bool {
        false
    }
    fn mixed_precision(&self) -> bool {
        false
    }
    fn networks(&self, device: &Device) -> Networks {
        Networks {
            light: LinearConfig::new(FEATURES, 1).init(device),
            heavy: Heavy {
                input: LinearConfig::new(FEATURES, WIDE).init(device),
                output: LinearConfig::new(WIDE, 1).init(device),
            },
        }
    }
    fn examples_in(&self, batch: &Tensor<2>) -> usize {
        batch.dims()[0]
    }
    fn measuring_batch(&self, examples: usize, device: &Device) -> Tensor<2> {
        Tensor::random([examples, FEATURES], Distribution::Normal(0.0, 1.0), device)
    }
    fn loss(&self, n: &Networks, phase: usize, x: Tensor<2>, _: StepContext) -> StepLoss {
        let out = match phase {
            0 => n.light.forward(x),
            _ => n.heavy.output.forward(n.heavy.input.forward(x).tanh()),
        };
        let total = out.square().mean();
        StepLoss {
            reported: total.clone(),
            total,
        }
    }
    fn phase_gradients(&self, n: &Networks, phase: usize, mut grads: Gradients) -> GradientsParams {
        match phase {
            0 => GradientsParams::from_module(&mut grads, &n.light),
            _ => GradientsParams::from_module(&mut grads, &n.heavy),
        }
    }
    fn parameters(&self) -> u64 {
        (FEATURES + 1 + FEATURES * WIDE + WIDE + WIDE + 1) as u64
    }
    fn step_memory(&self, _: BackendKind, _: Precision, examples: usize) -> AnalyticStep {
        AnalyticStep {
            parameters: 4 * self.parameters(),
            activations: 4 * (3 * WIDE * examples) as u64,
            data: 4 * (FEATURES * examples) as u64,
        }
    }
}

#[derive(Default)]
struct Collect(Vec<Event>);

impl EventSink for Collect {
    fn emit(&mut self, event: Event) {
        self.0.push(event);
    }
}

#[test]
fn each_phase_is_planned_by_its_own_peak_and_keeps_the_effective_batch() {
    const MIB: u64 = 1 << 20;
    let target = BackendKind::Flex.into();
    let device = BackendKind::Flex.device().unwrap();
    let resident = MemoryMeter::new(BackendKind::Flex, &device)
        .sample()
        .allocated_bytes;
    // The heavy phase holds about 96 kB per example for backward (three WIDE-wide f32
    // tensors); the light one a few hundred bytes. 512 examples of the heavy phase need
    // about 48 MiB, so a budget of 40 MiB over the networks splits it; the light phase
    // takes the whole step at once.
    let effective = 512;
    let budget = resident + 40 * MIB;
    let fixed = Fixed {
        n_patches: Some(1),
        ..Fixed::default()
    };
    let defaults = headroom_core::model::DefaultBatch {
        spectrograms: effective,
        patches: 1,
    };
    let planning = Planning::new(budget, Some(effective), fixed, defaults).unwrap();
    let share = RunShare {
        resident_bytes: resident,
        ..RunShare::default()
    };
    let mut events = Collect::default();
    let prepared = block_on(plan::prepare(
        target,
        &UnevenPhases,
        &planning,
        share,
        &mut events,
    ))
    .inspect_err(|_| {
        for event in &events.0 {
            eprintln!("{}", serde_json::to_string(event).unwrap_or_default());
        }
    })
    .expect("a plan");
    let plan = &prepared.plan;
    let [light, heavy] = plan.phases.as_slice() else {
        panic!("a plan of two phases: {plan:?}");
    };
    assert_eq!(
        (light.phase.as_str(), heavy.phase.as_str()),
        ("light", "heavy")
    );
    assert_eq!(
        (light.micro_batch, light.accumulation),
        (effective, 1),
        "the light phase takes the whole step: {}",
        plan.reason
    );
    assert!(
        heavy.micro_batch < effective && heavy.accumulation > 1,
        "the heavy phase accumulates: {}",
        plan.reason
    );
    for phase in &plan.phases {
        assert!(
            phase.micro_batch * phase.accumulation >= effective
                && phase.micro_batch * (phase.accumulation - 1) < effective,
            "{} keeps the effective batch {effective}: {phase:?}",
            phase.phase
        );
        assert!(phase.predicted_peak_bytes <= budget, "{phase:?}");
    }
    assert_eq!(
        plan.predicted_peak_bytes,
        heavy.predicted_peak_bytes.max(light.predicted_peak_bytes)
    );
    // The plan's own split, for a loop that cuts every phase alike, fits both phases.
    assert_eq!(
        (plan.micro_batch, plan.accumulation),
        (heavy.micro_batch, heavy.accumulation)
    );

    // The dry-run of the plan taken measured each phase apart, under the budget and at
    // most 8% under its prediction, never over it.
    let dry_runs: Vec<_> = events
        .0
        .iter()
        .filter_map(|e| match e {
            Event::DryRun(d) => Some(d),
            _ => None,
        })
        .collect();
    let last = dry_runs
        .iter()
        .rev()
        .find(|d| {
            d.phases
                .iter()
                .zip(&plan.phases)
                .all(|(m, p)| m.micro_batch == p.micro_batch)
        })
        .expect("the plan's own split was dry-run");
    assert!(last.fits, "{last:?}");
    assert_eq!(last.phases.len(), 2);
    for phase in &last.phases {
        assert!(phase.measured_peak_bytes <= budget, "{phase:?}");
        let error = (phase.predicted_peak_bytes as f64 - phase.measured_peak_bytes as f64)
            / phase.measured_peak_bytes as f64;
        assert!(
            (0.0..=0.08).contains(&error),
            "{}: predicted {} measured {} ({:+.1}%)",
            phase.phase,
            phase.predicted_peak_bytes,
            phase.measured_peak_bytes,
            error * 100.0
        );
    }
    assert!(
        heavy_bytes(last) > light_bytes(last),
        "the heavy phase measured heavier: {last:?}"
    );
}

fn light_bytes(d: &headroom_core::events::DryRunReport) -> u64 {
    d.phases[0].measured_peak_bytes
}

fn heavy_bytes(d: &headroom_core::events::DryRunReport) -> u64 {
    d.phases[1].measured_peak_bytes
}
