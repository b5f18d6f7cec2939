//! `trainer-cli bench --json` on the CPU backends, its memory trace on flex and wgpu, and
//! `bench --report` on flex and wgpu.

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
    let result = bench("flex", "2", "3", "1");
    check(&result, "flex", 2.0);
    // Kernel launches are a cubecl device's; a CPU backend reports none.
    assert!(result.get("launches_per_step").is_none(), "{result}");
}

/// `--classifier` times the network it names (the PyTorch twin's parameter counts: vit
/// 142,532, cnn 98,148) and is refused for a model without one.
#[test]
fn bench_times_the_classifier_it_is_given() {
    for (network, params) in [("vit", 142_532), ("cnn", 98_148)] {
        let lines = run_json(&[
            "bench",
            "--json",
            "--model",
            "spec-classifier",
            "--classifier",
            network,
            "--batch-size",
            "2",
            "--n-patches",
            "1",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--threads",
            "2",
        ]);
        assert_eq!(lines[0]["params"], params, "{network}: {lines:?}");
    }
    let output = common::trainer_cli()
        .args([
            "bench",
            "--model",
            "dcase-ae",
            "--classifier",
            "cnn",
            "--steps",
            "1",
        ])
        .output()
        .expect("trainer-cli starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("--classifier"),
        "{stderr}"
    );
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

/// `bench --report FILE`: runs the models and the planner's cells as child processes and
/// writes the JSON a user attaches; returns it with the printed table.
fn report(extra: &[&str]) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.json");
    let path_arg = path.to_str().unwrap();
    let mut args = vec!["bench", "--report", path_arg, "--threads", "2"];
    args.extend_from_slice(extra);
    let output = common::trainer_cli().args(&args).output().unwrap();
    common::assert_success(&output, &args);
    let table = String::from_utf8(output.stdout).unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    (serde_json::from_str(&json).unwrap(), table)
}

/// A planner row as the report holds it: the plan within the budget, the run's own peak
/// measured, never over the budget, its dry-runs measured; `within`: the planner's
/// promise, where the test holds it to one.
fn check_planner_row(
    row: &serde_json::Value,
    budget: u64,
    effective: u64,
    within: Option<f64>,
) -> f64 {
    assert_eq!(row["budget_bytes"], budget);
    assert_eq!(row["effective_batch"], effective);
    let check = &row["check"]["Ok"];
    assert!(check.is_object(), "the run gave no check: {row}");
    let predicted = check["plan"]["predicted_peak_bytes"].as_u64().unwrap();
    let measured = check["measured_peak_bytes"].as_u64().unwrap();
    assert!(predicted <= budget && measured > 0, "{check}");
    assert_eq!(check["plan"]["effective_batch"], effective);
    let error = check["error"].as_f64().unwrap();
    assert!(
        (error - (predicted as f64 - measured as f64) / measured as f64).abs() < 1e-9,
        "{check}"
    );
    if let Some(within) = within {
        assert!(error.abs() <= within, "prediction off by {error}: {check}");
    }
    assert_eq!(check["recoveries"], 0);
    assert_eq!(check["over_budget"], false);
    let dry = check["dry_runs"].as_array().unwrap();
    assert!(!dry.is_empty() && dry[0]["measured_peak_bytes"].as_u64().unwrap() > 0);
    error
}

#[test]
fn report_on_flex_times_the_models_and_checks_the_planner() {
    let (report, table) = report(&[
        "--backend",
        "flex",
        "--report-models",
        "vq-patch-ae,dcase-ae",
        "--report-cells",
        "128MiB:256",
        "--steps",
        "2",
        "--warmup",
        "1",
    ]);
    assert_eq!(report["backend"], "flex");
    assert_eq!(report["threads"], 2);
    assert!(
        report["machine"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["backend"] == "flex")
    );
    let speed = report["speed"].as_array().unwrap();
    let names: Vec<_> = speed.iter().map(|r| r["model"].as_str().unwrap()).collect();
    assert_eq!(names, ["vq-patch-ae", "dcase-ae"]);
    for row in speed {
        let r = &row["result"]["Ok"];
        assert!(r.is_object(), "{row}");
        assert_eq!(
            (r["steps"].as_u64(), r["threads"].as_u64()),
            (Some(2), Some(2))
        );
        assert!(r["step_ms_median"].as_f64().unwrap() > 0.0);
        assert!(r["mem_peak_bytes"].as_u64().unwrap() > 1 << 20, "{r}");
        assert!(table.contains(row["model"].as_str().unwrap()), "{table}");
    }
    // Each model at its own default batch: the default model 8 x 4, dcase-ae 16 x 32.
    assert_eq!(
        (
            speed[0]["result"]["Ok"]["batch"].as_u64(),
            speed[0]["result"]["Ok"]["patches"].as_u64()
        ),
        (Some(8), Some(4))
    );
    assert_eq!(
        (
            speed[1]["result"]["Ok"]["batch"].as_u64(),
            speed[1]["result"]["Ok"]["patches"].as_u64()
        ),
        (Some(16), Some(32))
    );
    let planner = report["planner"].as_array().unwrap();
    assert_eq!(planner.len(), 1);
    // On flex the planner holds within 3% over bench/plan_inrun's grid: 8% is its promise.
    let error = check_planner_row(&planner[0], 128 << 20, 256, Some(0.08));
    let summary = &report["summary"];
    assert_eq!(
        (summary["cells"].as_u64(), summary["checked"].as_u64()),
        (Some(1), Some(1))
    );
    assert!((summary["worst_abs_error"].as_f64().unwrap() - error.abs()).abs() < 1e-12);
    assert_eq!(summary["holds"], error.abs() <= 0.03);
    assert!(table.contains("1 of 1 runs checked"), "{table}");
}

/// Bad input is refused before anything runs, in words that name it.
#[test]
fn report_refuses_an_unknown_model_and_a_malformed_cell() {
    let refused = |flag: &str, value: &str| {
        common::run_failing(&[
            "bench",
            "--report",
            "r.json",
            "--backend",
            "flex",
            flag,
            value,
        ])
    };
    let stderr = refused("--report-models", "no-such-model");
    assert!(
        stderr.contains("no-such-model") && stderr.contains("vq-patch-ae"),
        "{stderr}"
    );
    let stderr = refused("--report-cells", "128MiB");
    assert!(
        stderr.contains("BUDGET:EFFECTIVE_BATCH") && stderr.contains("128MiB"),
        "{stderr}"
    );
    assert!(!std::path::Path::new("r.json").exists());
}

/// On wgpu (lavapipe in CI, a GPU on a user's machine) the report reads the device pool's
/// figures. The small dcase-ae, timed and planned at one tiny budget: a step of the default
/// model takes seconds on lavapipe. Its accuracy there is not held to the promise: at this
/// size a pool's page is a large share of the footprint (the report shows it).
#[cfg(feature = "wgpu")]
#[test]
fn report_on_wgpu() {
    let (report, table) = report(&[
        "--backend",
        "wgpu",
        "--report-models",
        "dcase-ae",
        "--report-plan-model",
        "dcase-ae",
        "--report-cells",
        "64MiB:512",
        "--report-run-steps",
        "1",
        "--steps",
        "1",
        "--warmup",
        "1",
    ]);
    assert_eq!(report["backend"], "wgpu");
    let r = &report["speed"][0]["result"]["Ok"];
    assert_eq!(
        (r["backend"].as_str(), r["batch"].as_u64()),
        (Some("wgpu"), Some(16))
    );
    // A device pool's figures: its footprint, and the pages it holds.
    assert!(r["mem_peak_bytes"].as_u64().unwrap() > 0, "{r}");
    assert!(!r["pools"].as_array().unwrap().is_empty(), "{r}");
    // Its timed step's kernel launches, each kernel's summing to them.
    let launches = r["launches_per_step"].as_f64().unwrap();
    let kernels: u64 = r["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["launches"].as_u64().unwrap())
        .sum();
    assert!(launches >= 10.0 && kernels as f64 == launches, "{r}");
    check_planner_row(&report["planner"][0], 64 << 20, 512, None);
    assert!(
        table.contains("The planner against real runs of dcase-ae"),
        "{table}"
    );
}
