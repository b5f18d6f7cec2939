//! `trainer-cli bench --json` on the CPU backends, and its memory trace on flex and wgpu.

mod common;

use common::run_json;

fn bench(backend: &str, batch: &str, steps: &str, warmup: &str) -> serde_json::Value {
    let lines = run_json(&[
        "bench",
        "--json",
        "--backend",
        backend,
        "--batch-size",
        batch,
        "--n-patches",
        "1",
        "--steps",
        steps,
        "--warmup",
        warmup,
        "--threads",
        "2",
    ]);
    assert_eq!(lines.len(), 1, "one JSON line: {lines:?}");
    lines.into_iter().next().unwrap()
}

fn check(result: &serde_json::Value, backend: &str, patches: f64) {
    assert_eq!(result["backend"], backend);
    assert_eq!(result["threads"], 2);
    assert_eq!(result["params"], 392_193);
    let pps = result["patches_per_s"].as_f64().unwrap();
    let median = result["step_ms_median"].as_f64().unwrap();
    assert!(pps > 0.0 && median > 0.0);
    // patches/s is the patches of a step over the median step time.
    assert!((pps - patches / (median / 1e3)).abs() < 1e-6 * pps.max(1.0) + 0.01);
    assert!(
        result["mem_peak_bytes"].as_u64().unwrap() > 1 << 20,
        "{result}"
    );
}

#[test]
fn bench_reports_flex() {
    check(&bench("flex", "2", "3", "1"), "flex", 2.0);
}

/// ndarray is slow (docs/BENCHMARKS.md), and the test profile builds it unoptimised
/// (Cargo.toml): one step of one patch, not warmed up, keeps this test short.
#[test]
fn bench_reports_ndarray() {
    check(&bench("ndarray", "1", "1", "0"), "ndarray", 1.0);
}

/// What a step keeps from the input to the loss (autodiff's activations), by the memory
/// trace, with Headroom's forms and with burn's (`--plain-layers`).
fn kept_bytes(backend: &str, plain: bool) -> (u64, serde_json::Value) {
    let mut args = vec![
        "bench",
        "--json",
        "--memory-trace",
        "--backend",
        backend,
        "--batch-size",
        "8",
        "--threads",
        "2",
    ];
    if plain {
        args.push("--plain-layers");
    }
    let lines = run_json(&args);
    assert_eq!(lines.len(), 1, "one JSON line: {lines:?}");
    let trace = lines.into_iter().next().unwrap();
    let at = |stage: &str| {
        trace["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["stage"] == stage)
            .unwrap_or_else(|| panic!("no {stage} in {trace}"))["in_use_bytes"]
            .as_u64()
            .unwrap()
    };
    (at("loss") - at("input"), trace)
}

/// Every hidden activation is kept once, not twice: on flex all but the first layer's.
#[test]
fn the_memory_trace_shows_what_the_flex_forms_keep() {
    let (auto, trace) = kept_bytes("flex", false);
    let (plain, _) = kept_bytes("flex", true);
    assert_eq!(trace["patches"], 8);
    assert!(
        auto * 10 < plain * 8,
        "flex keeps {auto} bytes, burn's layers {plain}"
    );
}

/// On wgpu (lavapipe in CI) the output-only layers keep about half of what burn's do.
#[cfg(feature = "wgpu")]
#[test]
fn the_memory_trace_shows_what_the_gpu_layers_keep() {
    let (auto, trace) = kept_bytes("wgpu", false);
    let (plain, _) = kept_bytes("wgpu", true);
    assert_eq!(trace["source"], "device_pool");
    assert!(
        auto * 10 < plain * 6,
        "wgpu keeps {auto} bytes, burn's layers {plain}"
    );
}
