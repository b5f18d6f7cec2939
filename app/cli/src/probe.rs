//! `trainer-cli probe`: the devices Headroom could train on, and the auto choice.

use anyhow::Result;
use headroom_core::auto::choose;
use headroom_core::probe::gpus::ProbeSettings;
use headroom_core::probe::{self, DeviceReport, isolate};
use headroom_core::size::gib;

use crate::args::ProbeArgs;

pub fn run(args: ProbeArgs) -> Result<()> {
    let allocation_cap = if args.no_allocation_probe {
        None
    } else {
        Some(headroom_core::size::parse_size(&args.allocation_cap)?)
    };
    let settings = ProbeSettings {
        allocation_cap,
        software_adapters: true,
    };
    let report = isolate::probe_machine(std::time::Duration::from_secs_f64(args.timeout), settings);
    let choice = choose(&report);
    if args.json {
        let out = serde_json::json!({
            "devices": report.devices,
            "findings": report.findings,
            "elapsed_ms": report.elapsed_ms,
            "auto": { "backend": choice.backend, "selector": choice.device.as_ref().map(|d| &d.selector), "reason": choice.reason },
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("{}", table(&report.devices, &choice));
    for finding in &report.findings {
        println!("- {finding}");
    }
    println!("{}", choice.reason);
    println!("(probed in {} ms)", report.elapsed_ms);
    Ok(())
}

fn memory(figure: &probe::MemoryFigure) -> String {
    match figure.bytes {
        Some(b) if figure.at_least => format!(">= {}", gib(b)),
        Some(b) => gib(b),
        None => "unknown".to_string(),
    }
}

fn table(devices: &[DeviceReport], choice: &headroom_core::auto::Choice) -> String {
    let header = [
        "",
        "backend",
        "device",
        "name",
        "kind",
        "api",
        "free",
        "total",
        "precisions",
        "max buffer",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for d in devices {
        let chosen = choice
            .device
            .as_ref()
            .is_some_and(|c| c.backend == d.backend && c.selector == d.selector);
        rows.push(vec![
            if chosen { "*".into() } else { String::new() },
            d.backend.to_string(),
            d.selector.clone(),
            d.name.clone(),
            d.class.label().to_string(),
            d.api.clone(),
            memory(&d.free_memory),
            memory(&d.total_memory),
            d.precisions
                .iter()
                .map(|p| format!("{p:?}").to_lowercase())
                .collect::<Vec<_>>()
                .join(","),
            d.max_allocation_bytes
                .map_or_else(|| "-".into(), headroom_core::size::human),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    let mut notes = String::new();
    for d in devices {
        for note in &d.notes {
            notes.push_str(&format!("{} {}: {note}\n", d.backend, d.selector));
        }
        for (what, figure) in [("free", &d.free_memory), ("total", &d.total_memory)] {
            let how = if figure.bytes.is_some() {
                "from"
            } else {
                "unknown:"
            };
            notes.push_str(&format!(
                "{} {}: {what} memory {how} {}\n",
                d.backend, d.selector, figure.source
            ));
        }
    }
    out + &notes
}
