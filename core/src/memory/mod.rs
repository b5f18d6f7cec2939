//! Memory accounting a planner can rely on: bytes allocated now and the peak since a reset.
//!
//! On CPU backends tensors live in host memory and the [`alloc`] counter measures them. On
//! cubecl backends (wgpu, CUDA) the device's memory pool reports bytes in use and reserved.
//! The peak there is the pool's footprint: the largest of the bytes it has reserved from the
//! driver (in use, cached, or lost to how it packs allocations into pages) over the readings
//! the meter has taken, which the trainer takes after forward, backward and the optimizer
//! step. Reserved, not in use, because a device runs out of memory when the pool cannot
//! reserve more, and on wgpu a step reserves well over what is in use at those points (the
//! temporaries freed between them, the pool's slack; figures in docs/BENCHMARKS.md).

pub mod alloc;
pub mod large_blocks;

/// The process's peak resident memory (`VmHWM` from /proc, the figure Python's
/// `ru_maxrss` gives on Linux); `None` where /proc does not exist.
pub fn host_peak_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use crate::budget::{Budget, OverBudget};

/// One reading of a device's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct MemoryReading {
    pub allocated_bytes: u64,
    pub peak_bytes: u64,
    /// Bytes the device pool holds, in use or cached; `None` on CPU backends.
    pub reserved_bytes: Option<u64>,
}

impl MemoryReading {
    /// What the memory holds from the system: the reserved bytes where a pool reports
    /// them, else the bytes in use.
    fn footprint(&self) -> u64 {
        self.allocated_bytes.max(self.reserved_bytes.unwrap_or(0))
    }
}

/// One pool of a device's memory: pages of one size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolPages {
    pub page_bytes: u64,
    /// Pages held now.
    pub pages: u64,
    /// The most pages held at once.
    pub pages_peak: u64,
    /// The largest allocation the pool served.
    pub largest_allocation_bytes: u64,
}

/// Where the figures come from, so front-ends can label them honestly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemorySource {
    /// The counting global allocator (host memory, whole process).
    HostAllocator,
    /// The cubecl device pool, peak sampled at step phases.
    DevicePool,
    /// Nothing measures this backend in this build.
    Unmeasured,
}

/// The window a [`MemoryMeter::open_window`] interrupted: its peak so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "close the window to restore the peak around it"]
pub struct Window {
    peak_bytes: u64,
    in_use_peak_bytes: u64,
}

/// Reads a device's memory the way its backend allows.
#[derive(Debug, Clone)]
pub struct MemoryMeter {
    device: Device,
    source: MemorySource,
    sampled_peak: u64,
    /// Device pools: the most bytes in use at one reading (the footprint is `sampled_peak`).
    sampled_in_use_peak: u64,
    budget: Option<Budget>,
}

impl MemoryMeter {
    pub fn new(backend: BackendKind, device: &Device) -> Self {
        let source = if backend.is_host() {
            if alloc::is_installed() {
                MemorySource::HostAllocator
            } else {
                MemorySource::Unmeasured
            }
        } else if device.memory_pool_usage().is_some() {
            MemorySource::DevicePool
        } else {
            MemorySource::Unmeasured
        };
        Self {
            device: device.clone(),
            source,
            sampled_peak: 0,
            sampled_in_use_peak: 0,
            budget: None,
        }
    }

    /// Treats readings above `budget` as out-of-memory (see [`MemoryMeter::check`]).
    pub fn with_budget(mut self, budget: Option<Budget>) -> Self {
        self.budget = budget;
        self
    }

    pub fn budget(&self) -> Option<&Budget> {
        self.budget.as_ref()
    }

    /// Samples, and reports out-of-memory when the peak since the last reset is above the
    /// budget: the guard that makes a budget behave like a device that size.
    pub fn check(&mut self) -> Result<MemoryReading, OverBudget> {
        let reading = self.sample();
        match self.budget.as_ref().and_then(Budget::bytes) {
            Some(budget) if reading.peak_bytes > budget => Err(OverBudget {
                peak_bytes: reading.peak_bytes,
                budget_bytes: budget,
            }),
            _ => Ok(reading),
        }
    }

    pub fn source(&self) -> MemorySource {
        self.source
    }

    /// Starts a new peak window. A device pool's cached pages still count: they are held
    /// until [`MemoryMeter::cleanup`] returns them.
    pub fn reset_peak(&mut self) {
        match self.source {
            MemorySource::HostAllocator => alloc::reset_peak(),
            _ => {
                let now = self.read();
                self.sampled_peak = now.footprint();
                self.sampled_in_use_peak = now.allocated_bytes;
            }
        }
    }

    /// Opens a peak window of its own inside the current one (a phase of a step): the
    /// peak from here to [`MemoryMeter::close_window`] is the inner window's, and the
    /// current window goes on after it as if none had been opened (its peak the larger of
    /// the two). On a device pool the inner window starts at the pages held already,
    /// since the pool keeps them.
    pub fn open_window(&mut self) -> Window {
        let outer = Window {
            peak_bytes: self.sample().peak_bytes,
            in_use_peak_bytes: self.in_use_peak(),
        };
        self.reset_peak();
        outer
    }

    /// Closes the inner window `outer` was returned for; its peak.
    pub fn close_window(&mut self, outer: Window) -> u64 {
        let peak = self.sample().peak_bytes;
        match self.source {
            MemorySource::HostAllocator => alloc::raise_peak(outer.peak_bytes as usize),
            _ => {
                self.sampled_peak = self.sampled_peak.max(outer.peak_bytes);
                self.sampled_in_use_peak = self.sampled_in_use_peak.max(outer.in_use_peak_bytes);
            }
        }
        peak
    }

    /// The most bytes in use since the last reset: the peak itself on the host, the largest
    /// in-use reading on a device pool (whose peak is its footprint).
    pub fn in_use_peak(&self) -> u64 {
        match self.source {
            MemorySource::HostAllocator => alloc::peak() as u64,
            _ => self.sampled_in_use_peak,
        }
    }

    /// Takes a reading; on device pools this also advances the sampled peak.
    pub fn sample(&mut self) -> MemoryReading {
        let mut reading = self.read();
        if self.source == MemorySource::DevicePool {
            self.sampled_peak = self.sampled_peak.max(reading.footprint());
            self.sampled_in_use_peak = self.sampled_in_use_peak.max(reading.allocated_bytes);
            reading.peak_bytes = self.sampled_peak;
        }
        reading
    }

    fn read(&self) -> MemoryReading {
        match self.source {
            MemorySource::HostAllocator => MemoryReading {
                allocated_bytes: alloc::allocated() as u64,
                peak_bytes: alloc::peak() as u64,
                reserved_bytes: None,
            },
            MemorySource::DevicePool => {
                let usage = self.device.memory_pool_usage().unwrap_or_default();
                MemoryReading {
                    allocated_bytes: usage.bytes_in_use,
                    peak_bytes: usage.bytes_in_use,
                    reserved_bytes: Some(usage.bytes_reserved),
                }
            }
            MemorySource::Unmeasured => MemoryReading::default(),
        }
    }

    /// A device pool's pages, pool by pool: what its footprint is made of (a cubecl pool
    /// sizes its pages to the largest allocation it served); empty on CPU backends.
    pub fn pages(&self) -> Vec<PoolPages> {
        if self.source != MemorySource::DevicePool {
            return Vec::new();
        }
        self.device
            .memory_pool_report()
            .unwrap_or_default()
            .into_iter()
            .map(|pool| PoolPages {
                page_bytes: pool.page_size,
                pages: pool.pages,
                pages_peak: pool.pages_peak,
                largest_allocation_bytes: pool.largest_alloc,
            })
            .collect()
    }

    /// The pool a cubecl device carves new allocations from: the second it reports, after
    /// the small-allocation pool (cubecl's adaptive memory lists the small pool, then the
    /// arena's current pool, then the pools a growth left behind).
    pub fn current_pages(&self) -> Option<PoolPages> {
        self.pages().get(1).copied()
    }

    /// Asks the device to return cached memory (cubecl pools; a no-op on CPU).
    pub fn cleanup(&self) {
        self.device.memory_cleanup();
    }
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use super::*;
    use burn::tensor::Tensor;

    /// A tensor freed between two readings still shows in a device pool's peak: the pool
    /// keeps the pages it reserved for it, and that is what the device gives out.
    #[test]
    fn a_device_pools_peak_is_its_footprint() {
        let _alone = crate::wgpu_pool_alone();
        let device = BackendKind::Wgpu
            .device()
            .expect("a wgpu adapter (lavapipe in CI)");
        let mut meter = MemoryMeter::new(BackendKind::Wgpu, &device);
        assert_eq!(meter.source(), MemorySource::DevicePool);
        meter.cleanup();
        meter.reset_peak();
        let big = Tensor::<1>::ones([16 << 20], &device); // 64 MiB
        let _ = big.clone().sum().into_scalar::<f32>();
        drop(big);
        let _ = device.sync();
        let reading = meter.sample();
        assert!(reading.allocated_bytes < 16 << 20, "{reading:?}");
        assert!(reading.peak_bytes >= 64 << 20, "{reading:?}");
        assert!(meter.in_use_peak() < 16 << 20);
        meter.cleanup();
    }
}
