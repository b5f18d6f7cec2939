//! Headroom's engine: the default model, memory accounting, the training loop and the
//! events it reports. No UI code lives here; front-ends consume [`events::Event`]s.

pub mod auto;
pub mod backend;
// Native measuring tools; a web page measures through its run's own step events.
#[cfg(not(target_arch = "wasm32"))]
pub mod bench;
pub mod budget;
pub mod checkpoint;
pub mod classifier;
pub mod config;
pub mod contrastive;
pub mod data;
pub mod eval;
pub mod events;
pub mod gan;
pub mod lengths;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod precision;
pub mod probe;
pub mod readback;
pub mod registry;
// Native, as `bench`, whose results it holds.
#[cfg(not(target_arch = "wasm32"))]
pub mod report;
pub mod setting;
pub mod size;
pub mod spec;
pub mod speech;
pub mod split;
pub mod step;
pub mod task;
pub mod train;
pub mod waveform;

pub use backend::{BackendError, BackendKind, DeviceTarget, Target};
pub use events::{Event, EventSink};
pub use registry::Trainer;
pub use train::{ModelTrainer, RunLength, RunOptions, TaskTrainer, TrainConfig, TrainError};

// Unit tests measure host memory, so their binary counts allocations like the CLI does.
#[cfg(test)]
#[global_allocator]
static ALLOC: memory::alloc::CountingAllocator =
    memory::alloc::CountingAllocator(std::alloc::System);

/// The wgpu device's memory pool is the whole process's: the unit tests that read it or fill
/// it take turns, so that one test's tensors never show in another's reading.
#[cfg(all(test, feature = "wgpu"))]
pub(crate) fn wgpu_pool_alone() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
