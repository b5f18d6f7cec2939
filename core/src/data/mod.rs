//! A run's clips: the dataset's index split into train, validation and test, read lazily
//! through a [`ClipStore`], and the loader settings that bound the host memory reading takes;
//! [`stream`] turns them into micro-batches of patches.

mod stream;

pub use stream::{EpochOrder, Normalization, PatchBatch, TrainStream, clip_patches};

use std::path::PathBuf;
use std::sync::Arc;

use headroom_datasets::dcase::{self, LayoutError};
use headroom_datasets::store::spectrogram_bytes;
use headroom_datasets::{
    ClipInfo, ClipReader, ClipStore, FeatureCache, FeatureSettings, FileError, LoadedFile,
    PatchSpec, Prefetch, Split, SyntheticDataset,
};
use serde::{Deserialize, Serialize};

use crate::config::{DatasetSource, TrainConfig};
use crate::model::Machine;
use crate::setting::{Described, PlainWords, Setting, Wording};

/// What to do with a file that cannot be a clip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnBadFile {
    /// Stop with an error naming the file.
    #[default]
    Fail,
    /// Leave it out, count it and list it at the end.
    Skip,
}

/// How clips are read: run-time settings, not part of a run's identity.
#[derive(Debug, Clone, PartialEq)]
pub struct LoaderOptions {
    /// Threads that decode, compute features and cut patches; 0 does that work on the
    /// training thread, as a web page must (it has no threads to spawn).
    pub workers: usize,
    /// Micro-batches read ahead of the one training (seed 003's prefetch factor).
    pub prefetch: usize,
    /// Host memory the loader may hold: read-ahead plus, when the whole dataset's
    /// spectrograms fit in half of it, the spectrograms themselves.
    pub host_memory_bytes: u64,
    pub on_bad_file: OnBadFile,
    /// A folder for log-mel features of recordings, reused across runs.
    pub cache: Option<PathBuf>,
    /// The DCASE dataset's files, handed over as bytes by their paths under the run's
    /// `--data-root` (a web page's picked folder), instead of read from disk.
    pub files: Option<Arc<[LoadedFile]>>,
}

/// Read-ahead of `jobs` (Prefetch): on `workers` threads; with none, on the compute pool
/// where the build has one but cannot start threads (the page's module with threads, whose
/// rayon pool is Web Workers: the clips' synthesis and features would otherwise run on the
/// training thread between steps while the pool waited, a third of the page's work on the
/// default model, bench/web_cpu_profile), else on the training thread as it asks.
pub(crate) fn read_ahead<J: Send + 'static, T: Send + 'static>(
    jobs: impl Iterator<Item = J> + Send + 'static,
    workers: usize,
    depth: usize,
    work: impl Fn(J) -> T + Send + Sync + 'static,
) -> Prefetch<J, T> {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    if workers == 0 && rayon::current_num_threads() > 1 {
        return Prefetch::spawned(jobs, depth, work, |job| rayon::spawn(job));
    }
    Prefetch::new(jobs, workers, depth, work)
}

impl Default for LoaderOptions {
    fn default() -> Self {
        Self {
            workers: if cfg!(target_arch = "wasm32") { 0 } else { 2 },
            prefetch: 2,
            host_memory_bytes: 1 << 30,
            on_bad_file: OnBadFile::Fail,
            cache: None,
            files: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("{}", self.describe(&PlainWords))]
    BadFile { first: FileError, count: usize },
    #[error("cannot use the feature cache {}: {source}", dir.display())]
    Cache {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("no train clips are left{}; a run needs normal clips in train/", skipped_words(*.skipped))]
    NoTrainClips { skipped: usize },
}

impl Described for DataError {
    fn describe(&self, words: &dyn Wording) -> String {
        match self {
            DataError::Layout(e) => e.describe(words),
            DataError::BadFile { first, count } => format!(
                "{}{}; fix or remove it, or leave bad files out ({})",
                first.describe(words),
                more(*count),
                words.setting(Setting::SkipBadFiles)
            ),
            other => other.to_string(),
        }
    }
}

fn more(count: usize) -> String {
    match count {
        0 | 1 => String::new(),
        n => format!(" ({} more bad file(s))", n - 1),
    }
}

fn skipped_words(skipped: usize) -> String {
    match skipped {
        0 => String::new(),
        n => format!(" after skipping {n} bad file(s)"),
    }
}

/// The clips of a run, by split, as positions in the store.
pub struct RunData {
    pub store: Arc<ClipStore>,
    pub train: Vec<usize>,
    pub validation: Vec<usize>,
    pub test: Vec<usize>,
    /// Files left out, with what was wrong (`--on-bad-file skip`).
    pub skipped: Vec<String>,
    pub loader: LoaderOptions,
    /// The class of each clip of the store: its machine's index in `machines`; models that
    /// learn machine IDs predict it.
    pub classes: Arc<Vec<i64>>,
    /// The train split's machines, sorted by type and ID.
    pub machines: Vec<Machine>,
}

/// Indexes the run's dataset and splits it; reads nothing yet.
pub fn open(config: &TrainConfig, loader: &LoaderOptions) -> Result<RunData, DataError> {
    let (clips, reader, problems) = match &config.dataset {
        DatasetSource::Synthetic(synthetic) => {
            let reader = ClipReader::new(SyntheticDataset::features(synthetic))
                .with_synthetic(synthetic.clone());
            (SyntheticDataset::index(synthetic), reader, Vec::new())
        }
        DatasetSource::Dcase {
            root,
            machine_type,
            features,
        } => {
            let index = match &loader.files {
                Some(files) => dcase::index_files(root, files, machine_type.as_deref())?,
                None => dcase::scan(root, machine_type.as_deref())?,
            };
            let cache = match &loader.cache {
                Some(dir) => Some(FeatureCache::new(dir).map_err(|source| DataError::Cache {
                    dir: dir.clone(),
                    source,
                })?),
                None => None,
            };
            let reader = ClipReader::new(*features).with_cache(cache);
            (index.clips, reader, index.problems)
        }
    };
    let mut skipped = Vec::new();
    report_bad_files(problems, loader.on_bad_file, &mut skipped)?;
    let every = config.validation_every_nth_clip;
    let (mut train, mut validation, mut test) = (Vec::new(), Vec::new(), Vec::new());
    let mut train_seen = 0;
    for (i, clip) in clips.iter().enumerate() {
        match clip.split {
            Split::Train => {
                if every > 0 && train_seen % every == every - 1 {
                    validation.push(i);
                } else {
                    train.push(i);
                }
                train_seen += 1;
            }
            Split::Test => test.push(i),
        }
    }
    let (classes, machines) = machine_classes(&clips, &train);
    let mut store = ClipStore::new(clips, reader);
    if fits_resident(&store, loader.host_memory_bytes) {
        store.keep_resident();
    }
    Ok(RunData {
        store: Arc::new(store),
        train,
        validation,
        test,
        skipped,
        loader: loader.clone(),
        classes: Arc::new(classes),
        machines,
    })
}

/// Each clip's machine as a class index among the machines of the `train` clips, sorted by
/// type and ID (a machine the train split lacks gets class 0), and those machines.
fn machine_classes(clips: &[ClipInfo], train: &[usize]) -> (Vec<i64>, Vec<Machine>) {
    let machine = |c: &ClipInfo| Machine {
        machine_type: c.machine_type.clone(),
        machine_id: c.machine_id,
    };
    let machines: std::collections::BTreeSet<Machine> =
        train.iter().map(|&i| machine(&clips[i])).collect();
    let machines: Vec<Machine> = machines.into_iter().collect();
    let classes = clips
        .iter()
        .map(|c| {
            machines
                .binary_search(&machine(c))
                .map_or(0, |class| class as i64)
        })
        .collect();
    (classes, machines)
}

/// Whether every clip's spectrogram fits in half the loader's host memory, judged from
/// the first clip's size (clips of a dataset share their length).
fn fits_resident(store: &ClipStore, host_memory_bytes: u64) -> bool {
    let clips = store.clips().len() as u64;
    let Some(first) = store.clips().first() else {
        return true;
    };
    match store.reader().read(first) {
        Ok(s) => spectrogram_bytes(&s).saturating_mul(clips) <= host_memory_bytes / 2,
        // The check pass reports the file; streaming is the safe choice meanwhile.
        Err(_) => false,
    }
}

/// `first()` on a second thread beside `second()` on this one, both results: making or
/// reading a data set's audio in two halves. A web page's WebAssembly has one thread: there
/// the two run one after the other. A panic in either is this thread's.
pub fn side_by_side<A: Send, B>(
    first: impl FnOnce() -> A + Send,
    second: impl FnOnce() -> B,
) -> (A, B) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::thread::scope(|scope| {
            let first = scope.spawn(first);
            let second = second();
            (
                first
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                second,
            )
        })
    }
    #[cfg(target_arch = "wasm32")]
    {
        let first = first();
        (first, second())
    }
}

/// With `Fail`, the first problem is the error; with `Skip`, each is logged and listed.
pub fn report_bad_files(
    problems: Vec<FileError>,
    on_bad_file: OnBadFile,
    skipped: &mut Vec<String>,
) -> Result<(), DataError> {
    let count = problems.len();
    let mut problems = problems.into_iter();
    match (on_bad_file, problems.next()) {
        (_, None) => Ok(()),
        (OnBadFile::Fail, Some(first)) => Err(DataError::BadFile { first, count }),
        (OnBadFile::Skip, Some(first)) => {
            for problem in std::iter::once(first).chain(problems) {
                tracing::warn!(%problem, "skipping a bad file");
                skipped.push(problem.to_string());
            }
            Ok(())
        }
    }
}

impl RunData {
    /// Reads every train and validation clip once, in parallel: checks it against the patch
    /// settings, drops (or fails on) bad files, and fits the normalization on the train clips.
    pub fn check(&mut self, spec: PatchSpec) -> Result<Normalization, DataError> {
        let store = self.store.clone();
        let jobs: Vec<(bool, usize)> = self
            .train
            .iter()
            .map(|&i| (true, i))
            .chain(self.validation.iter().map(|&i| (false, i)))
            .collect();
        let depth = 4 * self.loader.workers.max(1);
        let results = read_ahead(
            jobs.into_iter(),
            self.loader.workers,
            depth,
            move |(is_train, i)| {
                let stats = store.read(i).and_then(|s| {
                    spec.check(s.n_mels, s.frames)
                        .map_err(|e| FileError::new(store.clips()[i].describe(), e.into()))?;
                    let (mut sum, mut sum_sq) = (0.0f64, 0.0f64);
                    for &v in &s.data {
                        sum += f64::from(v);
                        sum_sq += f64::from(v) * f64::from(v);
                    }
                    Ok((sum, sum_sq, s.data.len()))
                });
                (is_train, i, stats)
            },
        );
        let (mut sum, mut sum_sq, mut n) = (0.0f64, 0.0f64, 0usize);
        let mut bad = Vec::new();
        let mut bad_clips = std::collections::HashSet::new();
        for (is_train, i, stats) in results {
            match stats {
                Ok((s, sq, count)) if is_train => {
                    sum += s;
                    sum_sq += sq;
                    n += count;
                }
                Ok(_) => {}
                Err(error) => {
                    bad_clips.insert(i);
                    bad.push(error);
                    if self.loader.on_bad_file == OnBadFile::Fail {
                        break;
                    }
                }
            }
        }
        report_bad_files(bad, self.loader.on_bad_file, &mut self.skipped)?;
        self.train.retain(|i| !bad_clips.contains(i));
        self.validation.retain(|i| !bad_clips.contains(i));
        if self.train.is_empty() {
            return Err(DataError::NoTrainClips {
                skipped: self.skipped.len(),
            });
        }
        Ok(Normalization::from_moments(sum, sum_sq, n))
    }

    pub fn clip(&self, index: usize) -> &ClipInfo {
        &self.store.clips()[index]
    }
}

/// The feature settings a dataset source reads with.
pub fn features_of(source: &DatasetSource) -> FeatureSettings {
    match source {
        DatasetSource::Synthetic(s) => SyntheticDataset::features(s),
        DatasetSource::Dcase { features, .. } => *features,
    }
}
