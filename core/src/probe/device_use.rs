//! The device's own count of its memory in use while something runs beside Headroom's
//! figures: NVIDIA's driver through NVML (loaded at run time, no CUDA toolkit needed), read
//! from a thread every few milliseconds. NVML counts the whole device (every process, the
//! driver's context included), so a report shows it beside the run's own peak rather than
//! as the same quantity. Elsewhere the platform's reading is the probe's free memory
//! (Vulkan's memory budget, DXGI, Metal), taken before and after, not sampled.

use serde::{Deserialize, Serialize};

/// One device's memory in use as its driver reported it while a piece of work ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceUse {
    pub device: String,
    /// Where the figures come from ("NVML").
    pub source: String,
    /// In use before the work started: what other processes and contexts held.
    pub before_bytes: u64,
    /// The most in use while it ran.
    pub peak_bytes: u64,
    pub total_bytes: u64,
}

impl DeviceUse {
    /// What the work itself added at its peak, as the driver saw it.
    pub fn added_bytes(&self) -> u64 {
        self.peak_bytes.saturating_sub(self.before_bytes)
    }
}

/// Between samples: NVML's reading costs microseconds, and a step lasts milliseconds or more.
#[cfg(not(target_arch = "wasm32"))]
const INTERVAL: std::time::Duration = std::time::Duration::from_millis(10);

/// Runs `work` while sampling every NVIDIA device's memory in use; the samples are empty
/// where NVML does not load (no NVIDIA driver) or reports nothing.
#[cfg(not(target_arch = "wasm32"))]
pub fn sampled_while<R>(work: impl FnOnce() -> R) -> (R, Vec<DeviceUse>) {
    use std::sync::atomic::{AtomicBool, Ordering};

    let Ok(nvml) = nvml_wrapper::Nvml::init() else {
        return (work(), Vec::new());
    };
    let devices: Vec<_> = (0..nvml.device_count().unwrap_or(0))
        .filter_map(|i| nvml.device_by_index(i).ok())
        .collect();
    let read = |d: &nvml_wrapper::Device| d.memory_info().ok().map(|m| (m.used, m.total));
    let mut uses: Vec<Option<DeviceUse>> = devices
        .iter()
        .map(|d| {
            read(d).map(|(used, total)| DeviceUse {
                device: d.name().unwrap_or_else(|_| "NVIDIA GPU".into()),
                source: "NVML".into(),
                before_bytes: used,
                peak_bytes: used,
                total_bytes: total,
            })
        })
        .collect();
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut peaks = vec![0u64; devices.len()];
            loop {
                for (peak, device) in peaks.iter_mut().zip(&devices) {
                    if let Some((used, _)) = read(device) {
                        *peak = (*peak).max(used);
                    }
                }
                if done.load(Ordering::Relaxed) {
                    return peaks;
                }
                std::thread::sleep(INTERVAL);
            }
        });
        let result = work();
        done.store(true, Ordering::Relaxed);
        // A sampler that panicked leaves the peaks at what was read before the work.
        let peaks = sampler.join().unwrap_or_default();
        for (use_, peak) in uses.iter_mut().zip(peaks) {
            if let Some(u) = use_ {
                u.peak_bytes = u.peak_bytes.max(peak);
            }
        }
        result
    });
    (result, uses.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_is_peak_over_before() {
        let u = DeviceUse {
            device: "GPU".into(),
            source: "NVML".into(),
            before_bytes: 500,
            peak_bytes: 1_700,
            total_bytes: 10_000,
        };
        assert_eq!(u.added_bytes(), 1_200);
        let idle = DeviceUse {
            peak_bytes: 400,
            ..u
        };
        assert_eq!(idle.added_bytes(), 0);
    }

    #[test]
    fn work_runs_once_and_returns_with_or_without_a_driver() {
        let mut calls = 0;
        let (value, uses) = sampled_while(|| {
            calls += 1;
            42
        });
        assert_eq!((value, calls), (42, 1));
        for u in uses {
            assert_eq!(u.source, "NVML");
            assert!(u.peak_bytes >= u.before_bytes && u.total_bytes >= u.peak_bytes);
        }
    }
}
