//! Where a run's memory budget comes from: the user's number, a simulated GPU, or the
//! device's free memory, each times `--memory-fraction` except the user's own number.

use anyhow::{Context, Result, bail};
use headroom_core::BackendKind;
use headroom_core::memory::parse_size;
use headroom_core::plan::devices;
use headroom_core::probe::{self, DeviceReport};

use crate::args::MemoryArgs;

/// A budget and the words that say where it came from.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub bytes: u64,
    pub source: String,
}

fn fraction(args: &MemoryArgs) -> Result<f64> {
    let f = args.memory_fraction;
    if !(f > 0.0 && f <= 1.0) {
        bail!("--memory-fraction must be above 0 and at most 1 (got {f})");
    }
    Ok(f)
}

/// The budget for `backend`; `device` is the probed device when one was chosen already.
pub fn resolve(
    args: &MemoryArgs,
    backend: BackendKind,
    device: Option<&DeviceReport>,
) -> Result<Resolved> {
    let f = fraction(args)?;
    if let Some(text) = &args.memory_budget {
        let bytes = parse_size(text).context("--memory-budget")?;
        return Ok(Resolved {
            bytes,
            source: format!("--memory-budget {}", headroom_core::memory::human(bytes)),
        });
    }
    if let Some(name) = &args.simulate_device {
        let d = devices::find(name)?;
        return Ok(Resolved {
            bytes: (d.memory_bytes as f64 * f) as u64,
            source: format!("simulated {} x {f}", d.label),
        });
    }
    let probed;
    let device = match device {
        Some(d) if d.backend == backend => d,
        _ if backend.is_host() => {
            probed = probe::cpu::probe()
                .into_iter()
                .find(|d| d.backend == backend)
                .context("the CPU probe found no CPU device")?;
            &probed
        }
        _ => {
            let report = crate::probe::machine(
                std::time::Duration::from_secs(20),
                crate::probe::AUTO_SETTINGS,
            );
            probed = report
                .devices
                .into_iter()
                .find(|d| d.backend == backend && d.usable)
                .with_context(|| {
                    format!(
                        "the probe found no usable {backend} device to size the budget from; \
                         run `trainer-cli probe`, or give --memory-budget"
                    )
                })?;
            &probed
        }
    };
    let (bytes, source) = device
        .budget(f)
        .map_err(|why| anyhow::anyhow!("{why}; give --memory-budget"))?;
    Ok(Resolved { bytes, source })
}
