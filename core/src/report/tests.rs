use super::*;
use crate::events::planned::Breakdown;
use crate::events::{DryRunReport, PlanReport, RecoveryReport, StepReport};
use crate::precision::Precision;

const MIB: u64 = 1 << 20;

fn plan(micro_batch: usize, predicted: u64, budget: u64) -> Event {
    Event::Plan(PlanReport {
        plan: Plan {
            micro_batch,
            n_patches: 4,
            accumulation: 2,
            checkpointing: false,
            precision: Precision::F32,
            effective_batch: 2 * 4 * micro_batch,
            predicted_peak_bytes: predicted,
            budget_bytes: budget,
            predicted_patches_per_s: 100.0,
            reason: "fits".into(),
            lengths: None,
            phases: Vec::new(),
        },
        breakdown: Breakdown::default(),
        calibration: Vec::new(),
    })
}

fn dry_run(micro_batch: usize, predicted: u64, measured: u64, refused: bool) -> Event {
    Event::DryRun(DryRunReport {
        attempt: 1,
        micro_batch,
        n_patches: 4,
        accumulation: 2,
        checkpointing: false,
        precision: Precision::F32,
        predicted_peak_bytes: predicted,
        measured_peak_bytes: measured,
        budget_bytes: 256 * MIB,
        fits: !refused && measured <= 256 * MIB,
        frames: None,
        refused: refused.then(|| "a buffer past the largest".to_string()),
        phases: Vec::new(),
    })
}

fn step(micro_batch: usize, peak: u64) -> Event {
    Event::Step(StepReport {
        step: 1,
        total_steps: 3,
        epoch: 0,
        loss: 0.5,
        reconstruction_loss: 0.4,
        lr: 1e-3,
        grad_norm: 1.0,
        patches_per_s: 50.0,
        step_ms: 10.0,
        micro_batch,
        accumulation: 2,
        mem_allocated_bytes: peak / 2,
        mem_peak_bytes: peak,
        mem_reserved_bytes: None,
        mem_budget_bytes: None,
        phases: Vec::new(),
        padding: None,
        predicted_peak_bytes: None,
    })
}

fn recovery() -> Event {
    Event::Recovery(RecoveryReport {
        step: 1,
        error: "out of memory".into(),
        from_micro_batch: 12,
        to_micro_batch: 10,
        n_patches: 4,
        from_accumulation: 2,
        to_accumulation: 3,
        effective_batch: 96,
        in_a_row: 1,
        phase: None,
    })
}

fn row(check: Result<PlanCheck, String>) -> PlannerRow {
    PlannerRow {
        model: "vq-patch-ae".into(),
        budget_bytes: 256 * MIB,
        effective_batch: 96,
        check,
        device_use: Vec::new(),
        seconds: 1.0,
    }
}

#[test]
fn a_run_is_read_at_its_plans_split() {
    // The first plan's split was re-planned; the last plan is the run's. Steps of another
    // split (a recovery's) do not count against it.
    let events = vec![
        plan(16, 300 * MIB, 256 * MIB),
        dry_run(16, 250 * MIB, 270 * MIB, false),
        dry_run(12, 200 * MIB, 210 * MIB, false),
        plan(12, 204 * MIB, 256 * MIB),
        step(12, 198 * MIB),
        step(12, 200 * MIB),
        step(8, 230 * MIB),
    ];
    let check = PlanCheck::from_events(&events).unwrap();
    assert_eq!(check.plan.micro_batch, 12);
    assert_eq!(check.measured_peak_bytes, 200 * MIB);
    assert!((check.error - 0.02).abs() < 1e-9, "{}", check.error);
    assert_eq!(
        (check.steps, check.recoveries, check.over_budget),
        (3, 0, false)
    );
    assert_eq!(check.dry_runs.len(), 2);
    let first = check.dry_runs[0].error().unwrap();
    assert!((first - (250.0 - 270.0) / 270.0).abs() < 1e-9);
}

#[test]
fn a_run_without_plan_or_steps_says_so() {
    assert!(
        PlanCheck::from_events(&[step(8, MIB)])
            .unwrap_err()
            .contains("no plan")
    );
    assert!(
        PlanCheck::from_events(&[plan(8, MIB, 2 * MIB)])
            .unwrap_err()
            .contains("no step")
    );
}

#[test]
fn a_refused_dry_run_has_no_error() {
    let refused = PlanCheck::from_events(&[
        plan(8, 100 * MIB, 256 * MIB),
        dry_run(16, 0, 0, true),
        step(8, 100 * MIB),
    ])
    .unwrap();
    assert_eq!(refused.dry_runs[0].error(), None);
    assert_eq!(
        PlannerSummary::of(&[row(Ok(refused))]).worst_dry_run_abs_error,
        None
    );
}

#[test]
fn the_summary_holds_only_within_the_targets() {
    let at = |predicted: u64, measured: u64| {
        PlanCheck::from_events(&[
            plan(8, predicted, 256 * MIB),
            dry_run(8, predicted, measured, false),
            step(8, measured),
        ])
        .unwrap()
    };
    let good = [
        row(Ok(at(102 * MIB, 100 * MIB))),
        row(Ok(at(99 * MIB, 100 * MIB))),
        row(Ok(at(103 * MIB, 100 * MIB))),
    ];
    let summary = PlannerSummary::of(&good);
    assert!(summary.holds, "{summary:?}");
    assert_eq!((summary.cells, summary.checked), (3, 3));
    assert!((summary.median_abs_error.unwrap() - 0.02).abs() < 1e-9);
    assert!((summary.worst_abs_error.unwrap() - 0.03).abs() < 1e-9);
    assert!((summary.most_under.unwrap() - 0.01).abs() < 1e-9);

    // One prediction 10% under: worst past 8%.
    let mut under = good.to_vec();
    under[1] = row(Ok(at(90 * MIB, 100 * MIB)));
    assert!(!PlannerSummary::of(&under).holds);

    // A recovery, a step over the budget, a failed cell: each breaks the promise.
    let mut recovered = at(102 * MIB, 100 * MIB);
    recovered.recoveries = 1;
    assert!(!PlannerSummary::of(&[row(Ok(recovered))]).holds);
    let over = PlanCheck::from_events(&[
        plan(8, 250 * MIB, 256 * MIB),
        step(8, 257 * MIB),
        recovery(),
    ])
    .unwrap();
    assert!(over.over_budget);
    assert_eq!(over.recoveries, 1);
    let s = PlannerSummary::of(&[row(Ok(over))]);
    assert_eq!((s.over_budget, s.recoveries, s.holds), (1, 1, false));
    let mut failed = good.to_vec();
    failed.push(row(Err("cannot start training".into())));
    let s = PlannerSummary::of(&failed);
    assert_eq!((s.cells, s.checked, s.holds), (4, 3, false));
    assert!(!PlannerSummary::of(&[]).holds);
}
