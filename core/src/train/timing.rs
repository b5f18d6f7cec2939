//! The timings a plan by length packs each step's examples by, kept between runs: packing
//! follows predicted time (`lengths::LengthBuckets::pack`), and timings measured anew differ
//! from run to run, so two runs of one seed made different micro-batches and computed
//! different sums (parameters 9e-5 apart after 40 steps of the tiny recogniser). The first
//! run of a build on a device and model keeps what it measured; later ones pack by it.

use burn::tensor::Device;

use crate::config::TrainConfig;
use crate::lengths::LengthCost;

use super::RunOptions;
use super::run_task::RunTask;

/// Where timings are kept (none in a web page, which has no cache directory).
#[cfg(not(target_arch = "wasm32"))]
pub(super) type Store = crate::plan::cache::CalibrationCache;

#[cfg(target_arch = "wasm32")]
pub(super) enum Store {}

/// The store a run's options name.
pub(super) fn store(options: &RunOptions) -> Option<&Store> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        options.timings.as_ref()
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = options;
        None
    }
}

/// A run's place in the store: its build, device, threads, model and longest example
/// (the calibration's lengths follow the longest).
pub(super) struct Kept<'a> {
    #[cfg(not(target_arch = "wasm32"))]
    store: &'a Store,
    #[cfg(not(target_arch = "wasm32"))]
    key: crate::plan::cache::CacheKey,
    #[cfg(target_arch = "wasm32")]
    _store: &'a Store,
}

/// The key of a run planned by length over `lengths`; `None` without a store or lengths.
pub(super) fn key<'a, T: RunTask>(
    config: &TrainConfig,
    task: &T,
    device: &Device,
    lengths: &[usize],
    store: Option<&'a Store>,
) -> Option<Kept<'a>> {
    let store = store?;
    let longest = lengths.iter().max()?;
    #[cfg(not(target_arch = "wasm32"))]
    {
        let model = crate::model::ModelSpec::of(task);
        let parts = [
            "length timings".to_string(),
            config.backend.name().to_string(),
            crate::probe::describe_device(config.backend, device),
            rayon::current_num_threads().to_string(),
            model.name,
            model.config.to_string(),
            longest.to_string(),
        ];
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        let key = crate::plan::cache::CacheKey::for_this_build(&parts)?;
        Some(Kept { store, key })
    }
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (config, task, device, longest);
        match *store {}
    }
}

impl Kept<'_> {
    /// The timings kept here, if an earlier run kept any this build can read.
    pub(super) fn read(&self) -> Option<LengthCost> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.store.read(&self.key)
        }
        #[cfg(target_arch = "wasm32")]
        match *self._store {}
    }

    /// Keeps `seconds` for the runs after this one; a store that cannot be written is
    /// said once and left out (each run then packs by its own timings).
    pub(super) fn write(&self, seconds: &LengthCost) {
        #[cfg(not(target_arch = "wasm32"))]
        if let Err(error) = self.store.write(&self.key, seconds) {
            tracing::warn!(
                "could not keep the length plan's timings in {}: {error}",
                self.store.dir().display()
            );
        }
        #[cfg(target_arch = "wasm32")]
        {
            let _ = seconds;
            match *self._store {}
        }
    }
}
