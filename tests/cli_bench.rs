//! `trainer-cli bench --json` on the CPU backends.

mod common;

use common::run_json;

fn bench(backend: &str, steps: &str) -> serde_json::Value {
    let lines = run_json(&[
        "bench",
        "--json",
        "--backend",
        backend,
        "--batch-size",
        "2",
        "--n-patches",
        "1",
        "--steps",
        steps,
        "--warmup",
        "1",
        "--threads",
        "2",
    ]);
    assert_eq!(lines.len(), 1, "one JSON line: {lines:?}");
    lines.into_iter().next().unwrap()
}

fn check(result: &serde_json::Value, backend: &str) {
    assert_eq!(result["backend"], backend);
    assert_eq!(result["threads"], 2);
    assert_eq!(result["params"], 392_193);
    let pps = result["patches_per_s"].as_f64().unwrap();
    let median = result["step_ms_median"].as_f64().unwrap();
    assert!(pps > 0.0 && median > 0.0);
    // patches/s is the patches of a step over the median step time.
    assert!((pps - 2.0 / (median / 1e3)).abs() < 1e-6 * pps.max(1.0) + 0.01);
    assert!(
        result["mem_peak_bytes"].as_u64().unwrap() > 1 << 20,
        "{result}"
    );
}

#[test]
fn bench_reports_flex() {
    check(&bench("flex", "3"), "flex");
}

/// ndarray is slow (docs/BENCHMARKS.md); one timed step keeps this test short.
#[test]
fn bench_reports_ndarray() {
    check(&bench("ndarray", "1"), "ndarray");
}
