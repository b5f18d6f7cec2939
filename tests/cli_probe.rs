//! `trainer-cli probe`: the machine as Headroom sees it.

mod common;

use common::run_json_document;

#[test]
fn probe_lists_the_cpu_the_adapters_and_explains_auto() {
    let report = run_json_document(&["probe", "--json"]);
    let devices = report["devices"].as_array().expect("a device list");
    let flex = devices
        .iter()
        .find(|d| d["backend"] == "flex")
        .expect("the CPU is always listed");
    assert_eq!(flex["class"], "cpu");
    assert!(flex["total_memory"]["bytes"].as_u64().unwrap() > 256 << 20);
    assert!(flex["free_memory"]["bytes"].as_u64().unwrap() > 0);

    let findings: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    let cuda_devices = devices.iter().filter(|d| d["backend"] == "cuda").count();
    if cuda_devices == 0 {
        assert!(
            findings.iter().any(|f| f.contains("CUDA")),
            "without CUDA devices the report says why: {findings:?}"
        );
    }
    // Mesa's software rasterisers (lavapipe/llvmpipe) are software adapters, with a memory
    // figure or the reason there is none, and auto never trains on them.
    for d in devices
        .iter()
        .filter(|d| d["name"].as_str().unwrap().contains("llvmpipe"))
    {
        assert_eq!(d["class"], "software_adapter", "{d}");
        let total = &d["total_memory"];
        assert!(
            total["bytes"].is_u64() || !total["source"].as_str().unwrap().is_empty(),
            "{d}"
        );
    }
    let only_software = devices
        .iter()
        .filter(|d| d["backend"] == "wgpu")
        .all(|d| d["class"] == "software_adapter");
    if cuda_devices == 0 && only_software {
        assert_eq!(report["auto"]["backend"], "flex", "{}", report["auto"]);
    }
    let reason = report["auto"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("auto: "), "{reason}");
    // How long it took is a benchmark's to judge (docs/BENCHMARKS.md), not a test's.
    assert!(report["elapsed_ms"].is_u64(), "{}", report["elapsed_ms"]);
}

/// Where no API reports free memory (lavapipe lacks VK_EXT_memory_budget), the probe
/// allocates up to its cap to find out, and never more; without the allocation probe the
/// figure is unknown, with the reason.
#[test]
fn the_allocation_probe_measures_free_memory_within_its_cap() {
    let capped = run_json_document(&["probe", "--json", "--allocation-cap", "256MiB"]);
    let free_of = |report: &serde_json::Value| -> Vec<serde_json::Value> {
        report["devices"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["backend"] == "wgpu")
            .map(|d| d["free_memory"].clone())
            .collect()
    };
    for free in free_of(&capped) {
        let source = free["source"].as_str().unwrap();
        if source.starts_with("allocation probe") {
            let bytes = free["bytes"].as_u64().unwrap();
            assert!(bytes > 0 && bytes <= 256 << 20, "{free}");
            if free["at_least"] == true {
                assert_eq!(bytes, 256 << 20, "stopped at the cap: {free}");
            }
        }
    }
    let none = run_json_document(&["probe", "--json", "--no-allocation-probe"]);
    for free in free_of(&none) {
        let source = free["source"].as_str().unwrap();
        assert!(!source.starts_with("allocation probe"), "{free}");
        assert!(free["bytes"].is_u64() || !source.is_empty(), "{free}");
    }
}

/// `train` without --backend is `--backend auto`: it probes, says why in one event, and
/// trains where it chose.
#[test]
fn train_auto_explains_its_choice() {
    let out = tempfile::tempdir().unwrap();
    let all = common::tiny_train(out.path(), &["--steps", "1"]);
    let choice = common::events(&all, "backend_choice");
    assert_eq!(choice.len(), 1, "{all:?}");
    let reason = choice[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(&format!("auto: {}", choice[0]["backend"].as_str().unwrap())),
        "{reason}"
    );
    let config = common::events(&all, "config");
    assert_eq!(config[0]["backend"], choice[0]["backend"]);
    // This project's CI machine has no GPU: auto must land on flex and name why.
    let report = run_json_document(&["probe", "--json"]);
    let gpu_usable = report["devices"].as_array().unwrap().iter().any(|d| {
        d["usable"] == true
            && ["discrete_gpu", "integrated_gpu", "virtual_gpu"]
                .contains(&d["class"].as_str().unwrap())
    });
    if !gpu_usable {
        assert_eq!(choice[0]["backend"], "flex");
        assert!(
            reason.contains(" - "),
            "the reason names what was passed over: {reason}"
        );
    }
}
