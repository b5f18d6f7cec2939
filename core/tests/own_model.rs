//! The example of a network of one's own (`core/examples/own_model.rs`) trains through the
//! public API: the planner chose its split under the budget and the run stayed within it,
//! its loss fell, and its test split was scored.

#[path = "../examples/own_model.rs"]
mod example;

use headroom_core::events::Event;

#[test]
fn a_network_defined_outside_headroom_trains_within_its_plan() {
    let (events, report) = example::train(12, false).expect("the example trains");
    let plan = events
        .iter()
        .find_map(|e| match e {
            Event::Plan(p) => Some(p.plan.clone()),
            _ => None,
        })
        .expect("the run was planned");
    assert_eq!(plan.effective_batch, 64);
    assert!(plan.predicted_peak_bytes <= plan.budget_bytes);
    let steps: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Step(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(steps.len(), 12);
    for step in &steps {
        assert!(
            step.mem_peak_bytes <= plan.budget_bytes,
            "step {} reached {} of {}",
            step.step,
            step.mem_peak_bytes,
            plan.budget_bytes
        );
    }
    let first: f64 = steps[..3].iter().map(|s| s.loss).sum();
    let last: f64 = steps[steps.len() - 3..].iter().map(|s| s.loss).sum();
    assert!(last < first, "the loss should fall: {first} -> {last}");
    assert_eq!(report.per_machine.len(), 2);
}
