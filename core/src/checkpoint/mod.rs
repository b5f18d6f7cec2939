//! Checkpoints: model (safetensors, loadable elsewhere), optimizer state (burnpack), the
//! run's state (JSON: step, configuration, normalisation, RNG position) and, where the run
//! keeps one, the weights' moving average (safetensors, the model's layout).
//!
//! Layout of a run directory:
//! ```text
//! OUT/checkpoint.json                  pointer to the newest complete checkpoint
//! OUT/checkpoints/step-00000100/       model.safetensors, optimizer.burnpack, state.json
//!                                      (and average.safetensors with --ema)
//! ```
//! A checkpoint is written into a scratch directory and renamed into place once complete;
//! only then is the pointer replaced, itself through a temporary file and a rename. A crash
//! at any moment leaves the previous checkpoint and the pointer to it intact; one between the
//! two renames leaves a newer complete step directory, which a run without a pointer resumes
//! from ([`resolve`]).

use std::fs;
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::{AdamWConfig, ModuleOptimizer};
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::config::TrainConfig;
use crate::data::Normalization;
use crate::model::{ModelConfig, ModelError};
use crate::setting::{Described, PlainWords, Setting, Wording};

mod directory;
mod files;

pub use directory::resolve;
use directory::{prune, sync_dir, write_synced};
pub use files::CheckpointFiles;

const FORMAT_VERSION: u32 = 1;
const MODEL_FILE: &str = "model.safetensors";
/// The weights' moving average, where the run keeps one (`--ema`): the model's layout.
const AVERAGE_FILE: &str = "average.safetensors";
const OPTIMIZER_FILE: &str = "optimizer.burnpack";
const STATE_FILE: &str = "state.json";
const POINTER_FILE: &str = "checkpoint.json";
/// Complete checkpoints kept in a run directory; older ones are pruned.
const KEEP: usize = 2;

/// Everything besides tensors that a resumed run needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointState {
    pub format_version: u32,
    /// Optimizer steps completed.
    pub step: u64,
    pub total_steps: u64,
    pub config: TrainConfig,
    pub normalization: Normalization,
    pub rng: RngState,
    /// The model's parameter ids in visiting order. burn keys optimizer state by parameter
    /// id, and safetensors keeps only names, so a loaded model takes these ids back.
    pub param_ids: Vec<u64>,
}

/// The data RNG: batches and patch positions are drawn from `seed` and the stream position,
/// so these two numbers restore it exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RngState {
    pub seed: u64,
    pub stream_position: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Pointer {
    latest: String,
    step: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot write checkpoint {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read checkpoint {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a Headroom checkpoint: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("{}", self.describe(&PlainWords))]
    Missing { path: PathBuf },
    #[error(
        "checkpoint {path} has no {file}: give the three files a run saves together \
         ({MODEL_FILE}, {OPTIMIZER_FILE}, {STATE_FILE})"
    )]
    MissingFile { path: PathBuf, file: &'static str },
}

impl Described for CheckpointError {
    fn describe(&self, words: &dyn Wording) -> String {
        match self {
            CheckpointError::Model(e) => e.describe(words),
            CheckpointError::Missing { path } => format!(
                "no checkpoint in {}: expected {POINTER_FILE} or {STATE_FILE}; give the \
                 directory of a run (its {}) or one of its checkpoints/step-* directories",
                path.display(),
                words.setting(Setting::OutDir)
            ),
            other => other.to_string(),
        }
    }
}

pub struct LoadedCheckpoint<M> {
    pub state: CheckpointState,
    pub model: M,
    /// The networks with the weights' moving average, where the run keeps one.
    pub average: Option<M>,
    pub optimizer: ModuleOptimizer,
    pub path: PathBuf,
}

/// The optimizer every run uses: AdamW with PyTorch's defaults, so that runs compare with
/// the reference script.
pub fn new_optimizer() -> ModuleOptimizer {
    AdamWConfig::new()
        .with_epsilon(1e-8)
        .with_weight_decay(0.01)
        .init()
}

/// Writes a checkpoint of `state` into `run_dir` and points `checkpoint.json` at it; with
/// `average`, the networks holding the weights' moving average too.
pub fn save<M: Module>(
    run_dir: &Path,
    state: &CheckpointState,
    model: &M,
    average: Option<&M>,
    optimizer: &ModuleOptimizer,
) -> Result<PathBuf, CheckpointError> {
    save_with_hook(run_dir, state, model, average, optimizer, &mut |_| Ok(()))
}

/// [`save`], calling `after_file` after each file lands in the scratch directory: tests use
/// it to simulate a crash part-way through.
pub fn save_with_hook<M: Module>(
    run_dir: &Path,
    state: &CheckpointState,
    model: &M,
    average: Option<&M>,
    optimizer: &ModuleOptimizer,
    after_file: &mut dyn FnMut(&Path) -> std::io::Result<()>,
) -> Result<PathBuf, CheckpointError> {
    let checkpoints = run_dir.join("checkpoints");
    let name = format!("step-{:08}", state.step);
    let final_dir = checkpoints.join(&name);
    let scratch = checkpoints.join(format!(".{name}.{}.tmp", std::process::id()));
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CheckpointError::Write { path, source }
    };
    if scratch.exists() {
        fs::remove_dir_all(&scratch).map_err(write_err(&scratch))?;
    }
    fs::create_dir_all(&scratch).map_err(write_err(&scratch))?;

    let files = CheckpointFiles::encode(state, model, average, optimizer, &scratch)?;
    for (file, bytes) in files.named() {
        let path = scratch.join(file);
        write_synced(&path, bytes).map_err(write_err(&path))?;
        after_file(&path).map_err(write_err(&path))?;
    }

    // Replacing a checkpoint of the same step (a resumed run re-saving it) must not leave a
    // moment with neither copy: move the old one aside first, delete it only at the end.
    let displaced = checkpoints.join(format!(".{name}.{}.old", std::process::id()));
    if final_dir.exists() {
        fs::rename(&final_dir, &displaced).map_err(write_err(&final_dir))?;
    }
    fs::rename(&scratch, &final_dir).map_err(write_err(&final_dir))?;
    sync_dir(&checkpoints);

    let pointer = Pointer {
        latest: format!("checkpoints/{name}"),
        step: state.step,
    };
    let pointer_json = serde_json::to_vec_pretty(&pointer).map_err(|e| invalid(run_dir, e))?;
    let pointer_tmp = run_dir.join(format!(".{POINTER_FILE}.{}.tmp", std::process::id()));
    write_synced(&pointer_tmp, &pointer_json).map_err(write_err(&pointer_tmp))?;
    fs::rename(&pointer_tmp, run_dir.join(POINTER_FILE)).map_err(write_err(run_dir))?;
    sync_dir(run_dir);

    if displaced.exists() {
        let _ = fs::remove_dir_all(&displaced);
    }
    prune(&checkpoints, &name);
    Ok(final_dir)
}

/// Reads only the state of a checkpoint (no tensors).
pub fn read_state(path: &Path) -> Result<CheckpointState, CheckpointError> {
    let dir = resolve(path)?;
    let state_path = dir.join(STATE_FILE);
    let text = fs::read(&state_path).map_err(|source| CheckpointError::Read {
        path: state_path.clone(),
        source,
    })?;
    parse_state(&text, &state_path)
}

fn parse_state(text: &[u8], state_path: &Path) -> Result<CheckpointState, CheckpointError> {
    let state: CheckpointState =
        serde_json::from_slice(text).map_err(|e| invalid(state_path, e))?;
    if state.format_version != FORMAT_VERSION {
        return Err(invalid(
            state_path,
            format!(
                "format version {} (this build reads {FORMAT_VERSION})",
                state.format_version
            ),
        ));
    }
    Ok(state)
}

/// Loads a checkpoint of model `C` onto `device` (an autodiff device to continue training);
/// a checkpoint of another model is refused with both names.
pub fn load<C: ModelConfig>(
    path: &Path,
    device: &Device,
) -> Result<LoadedCheckpoint<C::Model>, CheckpointError> {
    let (files, dir) = CheckpointFiles::read(path)?;
    files.decode::<C>(&dir, device)
}

/// The ids of `model`'s parameters in visiting order, for [`CheckpointState::param_ids`].
pub fn param_ids<M: Module>(model: &M) -> Vec<u64> {
    struct Ids(Vec<u64>);
    impl ModuleVisitor for Ids {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0.push(param.id.val());
        }
    }
    let mut ids = Ids(Vec::new());
    model.visit(&mut ids);
    ids.0
}

fn restore_param_ids<M: Module>(model: M, ids: &[u64]) -> Result<M, String> {
    let expected = param_ids(&model).len();
    if ids.len() != expected {
        return Err(format!(
            "it lists {} parameter ids, the model has {expected}",
            ids.len()
        ));
    }
    struct Restore<'a>(std::slice::Iter<'a, u64>);
    impl ModuleMapper for Restore<'_> {
        fn map_float<const D: usize>(&mut self, mut param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            if let Some(id) = self.0.next() {
                param.id = ParamId::from(*id);
            }
            param
        }
    }
    Ok(model.map(&mut Restore(ids.iter())))
}

fn invalid(path: &Path, reason: impl std::fmt::Display) -> CheckpointError {
    CheckpointError::Invalid {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;
    use crate::model::{VqAutoencoder, VqAutoencoderConfig};
    use burn::module::Module;

    fn params(model: &VqAutoencoder) -> Vec<f32> {
        crate::model::flat_parameters(model)
    }

    fn state(step: u64, model: &VqAutoencoder) -> CheckpointState {
        CheckpointState {
            format_version: FORMAT_VERSION,
            step,
            total_steps: 10,
            config: TrainConfig::default(),
            normalization: Normalization {
                mean: -40.0,
                std: 12.0,
            },
            rng: RngState {
                seed: 42,
                stream_position: step * 8,
            },
            param_ids: param_ids(model),
        }
    }

    /// A checkpoint of `model` at `step`, without a weights' average.
    fn saved(run: &Path, step: u64, model: &VqAutoencoder) {
        save(run, &state(step, model), model, None, &new_optimizer()).unwrap();
    }

    #[test]
    fn a_crash_mid_write_leaves_the_previous_checkpoint_loadable() {
        let run = tempfile::tempdir().unwrap();
        let device = BackendKind::Flex.device().unwrap().autodiff();
        device.seed(1);
        let first = VqAutoencoderConfig::default().init(&device);
        saved(run.path(), 1, &first);

        let second = VqAutoencoderConfig::default().init(&device);
        assert!(
            params(&first) != params(&second),
            "two initialisations should differ"
        );
        let err = save_with_hook(
            run.path(),
            &state(2, &second),
            &second,
            None,
            &new_optimizer(),
            &mut |p| {
                if p.ends_with(MODEL_FILE) {
                    Err(std::io::Error::other("simulated crash"))
                } else {
                    Ok(())
                }
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("simulated crash"), "{err}");

        let loaded = load::<VqAutoencoderConfig>(run.path(), &device).unwrap();
        assert_eq!(loaded.state, state(1, &first));
        assert_eq!(param_ids(&loaded.model), param_ids(&first));
        assert!(
            params(&loaded.model) == params(&first),
            "the loaded model is not the first one"
        );
        assert_eq!(loaded.model.num_params(), 392_193);
    }

    #[test]
    fn a_checkpoint_of_another_model_is_refused_with_both_names() {
        let run = tempfile::tempdir().unwrap();
        let device = BackendKind::Flex.device().unwrap().autodiff();
        let model = VqAutoencoderConfig::default().init(&device);
        saved(run.path(), 1, &model);
        let Err(error) = load::<crate::model::DcaseAeConfig>(run.path(), &device) else {
            panic!("a VQ checkpoint loaded as dcase-ae");
        };
        let error = error.to_string();
        assert!(
            error.contains("vq-patch-ae") && error.contains("dcase-ae"),
            "{error}"
        );
    }

    #[test]
    fn newest_checkpoint_wins_and_old_ones_are_pruned() {
        let run = tempfile::tempdir().unwrap();
        let device = BackendKind::Flex.device().unwrap().autodiff();
        let model = VqAutoencoderConfig::default().init(&device);
        for step in 1..=4 {
            saved(run.path(), step, &model);
        }
        assert_eq!(read_state(run.path()).unwrap().step, 4);
        let kept: Vec<_> = fs::read_dir(run.path().join("checkpoints"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(kept.len(), KEEP, "{kept:?}");
        // A step directory can be named directly too.
        assert_eq!(
            read_state(&run.path().join("checkpoints/step-00000003"))
                .unwrap()
                .step,
            3
        );
    }

    #[test]
    fn missing_and_corrupt_checkpoints_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_state(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(&dir.path().display().to_string()) && err.contains("output directory"),
            "{err}"
        );
        fs::write(dir.path().join(STATE_FILE), b"{ not json").unwrap();
        let err = read_state(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("state.json") && err.contains("not a Headroom checkpoint"),
            "{err}"
        );
    }

    #[test]
    fn files_given_by_name_are_the_files_saved_and_a_missing_one_is_named() {
        let run = tempfile::tempdir().unwrap();
        let device = BackendKind::Flex.device().unwrap().autodiff();
        let model = VqAutoencoderConfig::default().init(&device);
        saved(run.path(), 1, &model);
        let (saved, _) = CheckpointFiles::read(run.path()).unwrap();
        let upload = Path::new("upload");
        let mut given: Vec<_> = saved
            .named()
            .iter()
            .map(|(name, bytes)| (*name, bytes.to_vec()))
            .collect();
        given.push(("losses.csv", b"step,loss".to_vec()));
        given.reverse();
        assert_eq!(
            CheckpointFiles::from_named(given.clone(), upload).unwrap(),
            saved
        );
        given.retain(|(name, _)| *name != OPTIMIZER_FILE);
        let err = CheckpointFiles::from_named(given, upload)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("upload") && err.contains("has no optimizer.burnpack"),
            "{err}"
        );
    }
}
