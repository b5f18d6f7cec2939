//! A checkpoint's files in memory, encoded from a run and decoded into its networks: what
//! [`super::save`] writes into a step directory and a web page offers as downloads.

use std::fs;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::store::{ModuleSnapshot, SafetensorsStore};
use burn::tensor::{Bytes, Device};

use super::{
    AVERAGE_FILE, CheckpointError, CheckpointState, LoadedCheckpoint, MODEL_FILE, OPTIMIZER_FILE,
    STATE_FILE, invalid, new_optimizer, parse_state, resolve, restore_param_ids,
};
use crate::model::{ModelConfig, NamedConfig};

/// A checkpoint's files in memory: what [`save`] writes into a step directory, and what a
/// web page offers as downloads.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointFiles {
    /// `model.safetensors`
    pub model: Vec<u8>,
    /// `average.safetensors`, where the run keeps a moving average of its weights.
    pub average: Option<Vec<u8>>,
    /// `optimizer.burnpack`
    pub optimizer: Vec<u8>,
    /// `state.json`
    pub state: Vec<u8>,
}

impl CheckpointFiles {
    /// Encodes a checkpoint; `dir` is what errors name. Reads every tensor back
    /// synchronously, which a web page can only do on the CPU.
    pub fn encode<M: Module>(
        state: &CheckpointState,
        model: &M,
        average: Option<&M>,
        optimizer: &ModuleOptimizer,
        dir: &Path,
    ) -> Result<Self, CheckpointError> {
        let weights = |model: &M| {
            let mut store = SafetensorsStore::from_bytes(None);
            model.save_into(&mut store).map_err(|e| invalid(dir, e))?;
            store.get_bytes().map_err(|e| invalid(dir, e))
        };
        Ok(Self {
            model: weights(model)?,
            average: average.map(weights).transpose()?,
            optimizer: optimizer
                .into_bytes()
                .map_err(|e| invalid(dir, e))?
                .to_vec(),
            state: serde_json::to_vec_pretty(state).map_err(|e| invalid(dir, e))?,
        })
    }

    /// Each file's name and bytes.
    pub fn named(&self) -> Vec<(&'static str, &[u8])> {
        let mut named = vec![
            (MODEL_FILE, &self.model[..]),
            (OPTIMIZER_FILE, &self.optimizer[..]),
            (STATE_FILE, &self.state[..]),
        ];
        if let Some(average) = &self.average {
            named.push((AVERAGE_FILE, average));
        }
        named
    }

    /// A checkpoint from files given by name (a page's upload, the names [`named`] gives;
    /// other names are ignored); `dir` is what errors name.
    ///
    /// [`named`]: CheckpointFiles::named
    pub fn from_named<S: AsRef<str>>(
        files: impl IntoIterator<Item = (S, Vec<u8>)>,
        dir: &Path,
    ) -> Result<Self, CheckpointError> {
        let (mut model, mut optimizer, mut state, mut average) = (None, None, None, None);
        for (name, bytes) in files {
            match name.as_ref() {
                MODEL_FILE => model = Some(bytes),
                AVERAGE_FILE => average = Some(bytes),
                OPTIMIZER_FILE => optimizer = Some(bytes),
                STATE_FILE => state = Some(bytes),
                _ => {}
            }
        }
        let missing = |file| CheckpointError::MissingFile {
            path: dir.to_path_buf(),
            file,
        };
        Ok(Self {
            model: model.ok_or_else(|| missing(MODEL_FILE))?,
            average,
            optimizer: optimizer.ok_or_else(|| missing(OPTIMIZER_FILE))?,
            state: state.ok_or_else(|| missing(STATE_FILE))?,
        })
    }

    /// Reads the checkpoint a path names (see [`resolve`]).
    pub fn read(path: &Path) -> Result<(Self, PathBuf), CheckpointError> {
        let dir = resolve(path)?;
        let read = |file: &str| {
            let p = dir.join(file);
            fs::read(&p).map_err(|source| CheckpointError::Read { path: p, source })
        };
        let average = dir.join(AVERAGE_FILE);
        let files = Self {
            model: read(MODEL_FILE)?,
            average: average.exists().then(|| read(AVERAGE_FILE)).transpose()?,
            optimizer: read(OPTIMIZER_FILE)?,
            state: read(STATE_FILE)?,
        };
        Ok((files, dir))
    }

    /// The run's state; `dir` is what errors name.
    pub fn state(&self, dir: &Path) -> Result<CheckpointState, CheckpointError> {
        parse_state(&self.state, &dir.join(STATE_FILE))
    }

    /// Loads the checkpoint as a model `C` onto `device`, as [`Self::decode_task`] does.
    pub fn decode<C: ModelConfig>(
        self,
        dir: &Path,
        device: &Device,
    ) -> Result<LoadedCheckpoint<C::Model>, CheckpointError> {
        self.decode_task(dir, device, |c: &C| (c.init(device), new_optimizer()))
    }

    /// Loads the checkpoint as the networks of task `T` and their optimizer, which `fresh`
    /// makes from the saved configuration, onto `device` (autodiff to continue training); a
    /// checkpoint of another task is refused with both names. `dir` is what errors name.
    pub fn decode_task<T: NamedConfig, N: Module>(
        self,
        dir: &Path,
        device: &Device,
        fresh: impl FnOnce(&T) -> (N, ModuleOptimizer),
    ) -> Result<LoadedCheckpoint<N>, CheckpointError> {
        let state = self.state(dir)?;
        let config: T = state.config.model.config()?;
        let (mut model, optimizer) = fresh(&config);
        let mut store = SafetensorsStore::from_bytes(Some(self.model));
        model
            .load_from(&mut store)
            .map_err(|e| invalid(&dir.join(MODEL_FILE), e))?;
        let model = restore_param_ids(model, &state.param_ids)
            .map_err(|reason| invalid(&dir.join(STATE_FILE), reason))?;
        let average = match self.average {
            Some(bytes) => {
                let mut average = model.clone();
                average
                    .load_from(&mut SafetensorsStore::from_bytes(Some(bytes)))
                    .map_err(|e| invalid(&dir.join(AVERAGE_FILE), e))?;
                Some(average)
            }
            None => None,
        };
        // On the parameters' device: burn's `from_bytes` would use `Device::default()`, which
        // is WebGPU in the page's build even for a run on the CPU (vendor/burn-optim).
        let optimizer = optimizer
            .from_bytes_on(
                Bytes::from_bytes_vec(self.optimizer),
                &device.clone().inner(),
            )
            .map_err(|e| invalid(&dir.join(OPTIMIZER_FILE), e))?;
        Ok(LoadedCheckpoint {
            state,
            model,
            average,
            optimizer,
            path: dir.to_path_buf(),
        })
    }
}
