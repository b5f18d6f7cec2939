//! A run's settings from the page's address (`?backend=cpu&steps=40&start=1`): what a test or
//! a teacher's link starts a run with. The keys are `trainer-cli train`'s flags, shortened.

use headroom_core::model::{DefaultBatch, ModelConfig, VqAutoencoderConfig};
use headroom_core::plan::{Fixed, Planning, RequestError};
use headroom_core::resume::{Identity, Refusal, Saved, Setting};
use headroom_core::setting::Wording;
use headroom_core::size::parse_size;
use headroom_core::train::{DatasetSource, ResumeChanges};
use headroom_core::{BackendKind, RunLength, Target, TrainConfig};
use headroom_datasets::FeatureSettings;

/// Where the page trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WebBackend {
    /// WebGPU when the browser has an adapter, the CPU otherwise.
    #[default]
    Auto,
    /// WebAssembly on the CPU (burn's flex), single-threaded.
    Cpu,
    /// The browser's WebGPU.
    WebGpu,
}

impl WebBackend {
    pub fn name(self) -> &'static str {
        match self {
            WebBackend::Auto => "auto",
            WebBackend::Cpu => "cpu",
            WebBackend::WebGpu => "webgpu",
        }
    }
}

/// Every key the address may carry, with what it takes; an unknown key is an error, so a
/// misspelt link does not train with defaults unnoticed.
pub const KEYS: &[(&str, &str)] = &[
    ("backend", "auto, cpu or webgpu"),
    ("start", "1 starts the run when the page opens"),
    ("model", "a built-in model name (trainer-cli models)"),
    ("steps", "optimizer steps to train"),
    ("seed", "the run's seed"),
    ("lr", "peak learning rate"),
    ("budget", "memory budget, e.g. 512MiB"),
    ("batch", "spectrograms per micro-batch"),
    ("patches", "patches per spectrogram"),
    ("accumulation", "micro-batches per optimizer step"),
    ("plan", "0 trains the split given, without the planner"),
    ("eval", "0 skips scoring the test split"),
    ("ids", "machine IDs of the built-in dataset"),
    (
        "train_clips",
        "train clips per machine ID of the built-in dataset",
    ),
    (
        "test_clips",
        "normal, and anomalous, test clips per machine ID of the built-in dataset",
    ),
    (
        "machine_type",
        "only this machine type of the picked folder",
    ),
    ("sample_rate", "the picked recordings' sample rate in Hz"),
    (
        "resample",
        "1 resamples picked recordings at another rate instead of rejecting them",
    ),
];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    #[error(
        "the address has an unknown setting `{key}`; the page takes {}",
        known_keys()
    )]
    Unknown { key: String },
    #[error("the address's `{key}={value}` is not {what}")]
    Invalid {
        key: &'static str,
        value: String,
        what: &'static str,
    },
    #[error("the address's `{key}` must be at least 1 (got 0)")]
    Zero { key: &'static str },
    #[error("with plan=0 the address must give batch, patches and accumulation")]
    SplitNeeded,
    #[error(
        "the address's `{key}` is the built-in dataset's; a picked folder has its own \
         machine IDs and clips: remove it from the address"
    )]
    BuiltInOnly { key: &'static str },
    #[error(
        "the address's `{key}` is for a folder of your recordings: pick one (\"Choose a \
         folder...\" beside Data), or remove it from the address to train on the built-in dataset"
    )]
    FolderOnly { key: &'static str },
    #[error(
        "the checkpoint continues its run, which the address would change: {changes}; remove \
         them from the address to continue it, or start a new run without the checkpoint"
    )]
    ChangesResumedRun { changes: String },
}

fn known_keys() -> String {
    KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
}

/// What the address asked for; `None`: the engine's default.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PageSettings {
    pub backend: WebBackend,
    pub start: bool,
    pub model: Option<String>,
    pub steps: Option<u64>,
    pub seed: Option<u64>,
    pub lr: Option<f64>,
    pub budget_bytes: Option<u64>,
    pub batch: Option<usize>,
    pub patches: Option<usize>,
    pub accumulation: Option<usize>,
    pub plan: bool,
    pub eval: bool,
    pub ids: Option<u32>,
    pub train_clips: Option<usize>,
    pub test_clips: Option<usize>,
    pub machine_type: Option<String>,
    pub sample_rate: Option<u32>,
    pub resample: bool,
}

fn number<T: std::str::FromStr>(
    key: &'static str,
    value: &str,
    what: &'static str,
) -> Result<T, SettingsError> {
    value.parse().map_err(|_| SettingsError::Invalid {
        key,
        value: value.to_string(),
        what,
    })
}

fn positive(key: &'static str, value: &str) -> Result<usize, SettingsError> {
    match number::<usize>(key, value, "a whole number")? {
        0 => Err(SettingsError::Zero { key }),
        n => Ok(n),
    }
}

fn flag(key: &'static str, value: &str) -> Result<bool, SettingsError> {
    match value {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(SettingsError::Invalid {
            key,
            value: value.to_string(),
            what: "0 or 1",
        }),
    }
}

impl PageSettings {
    /// Reads a query string, with or without its leading `?`.
    pub fn parse(query: &str) -> Result<Self, SettingsError> {
        let mut s = PageSettings {
            plan: true,
            eval: true,
            ..PageSettings::default()
        };
        let query = query.strip_prefix('?').unwrap_or(query);
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let v = value.as_ref();
            match key.as_ref() {
                "backend" => {
                    s.backend = match v.to_ascii_lowercase().as_str() {
                        "auto" => WebBackend::Auto,
                        "cpu" => WebBackend::Cpu,
                        "webgpu" | "gpu" => WebBackend::WebGpu,
                        _ => {
                            return Err(SettingsError::Invalid {
                                key: "backend",
                                value: v.to_string(),
                                what: "auto, cpu or webgpu",
                            });
                        }
                    }
                }
                "start" => s.start = flag("start", v)?,
                "model" => s.model = Some(v.to_string()),
                "steps" => s.steps = Some(positive("steps", v)? as u64),
                "seed" => s.seed = Some(number("seed", v, "a whole number")?),
                "lr" => {
                    let lr: f64 = number("lr", v, "a positive number")?;
                    if !(lr.is_finite() && lr > 0.0) {
                        return Err(SettingsError::Invalid {
                            key: "lr",
                            value: v.to_string(),
                            what: "a positive number",
                        });
                    }
                    s.lr = Some(lr);
                }
                "budget" => {
                    s.budget_bytes = Some(parse_size(v).map_err(|_| SettingsError::Invalid {
                        key: "budget",
                        value: v.to_string(),
                        what: "a size such as 512MiB or 2GB",
                    })?)
                }
                "batch" => s.batch = Some(positive("batch", v)?),
                "patches" => s.patches = Some(positive("patches", v)?),
                "accumulation" => s.accumulation = Some(positive("accumulation", v)?),
                "plan" => s.plan = flag("plan", v)?,
                "eval" => s.eval = flag("eval", v)?,
                "ids" => s.ids = Some(positive("ids", v)? as u32),
                "train_clips" => s.train_clips = Some(positive("train_clips", v)?),
                "test_clips" => s.test_clips = Some(positive("test_clips", v)?),
                "machine_type" => s.machine_type = Some(v.to_string()),
                "sample_rate" => s.sample_rate = Some(positive("sample_rate", v)? as u32),
                "resample" => s.resample = flag("resample", v)?,
                other => {
                    return Err(SettingsError::Unknown {
                        key: other.to_string(),
                    });
                }
            }
        }
        if !s.plan && (s.batch.is_none() || s.patches.is_none() || s.accumulation.is_none()) {
            return Err(SettingsError::SplitNeeded);
        }
        Ok(s)
    }

    /// The model the run trains: the one named, else the default.
    pub fn model_name(&self) -> &str {
        self.model.as_deref().unwrap_or(VqAutoencoderConfig::NAME)
    }

    /// The run's configuration on `backend`, as `trainer-cli train` builds it from the same
    /// flags: the built-in dataset, or the folder the user picked (`picked`: its name, which
    /// stands for `--data-root`), the model's defaults, then what the address gives.
    pub fn train_config(
        &self,
        backend: BackendKind,
        picked: Option<&str>,
    ) -> Result<TrainConfig, String> {
        let mut c = TrainConfig {
            backend,
            ..TrainConfig::default()
        };
        if let Some(name) = &self.model {
            c.set_built_in_model(name).map_err(|e| e.to_string())?;
        }
        if let Some(folder) = picked {
            let built_in = [
                ("ids", self.ids.is_some()),
                ("train_clips", self.train_clips.is_some()),
                ("test_clips", self.test_clips.is_some()),
            ];
            if let Some((key, _)) = built_in.iter().find(|(_, given)| *given) {
                return Err(SettingsError::BuiltInOnly { key }.to_string());
            }
            let mut features = FeatureSettings::default();
            if let Some(rate) = self.sample_rate {
                features.logmel.sample_rate = rate;
            }
            features.resample = self.resample;
            c.dataset = DatasetSource::Dcase {
                root: folder.into(),
                machine_type: self.machine_type.clone(),
                features,
            }
            // The model's mel bands, as the built-in dataset has them.
            .with_mels(c.dataset.mels());
        } else {
            let for_folder = [
                ("machine_type", self.machine_type.is_some()),
                ("sample_rate", self.sample_rate.is_some()),
                ("resample", self.resample),
            ];
            if let Some((key, _)) = for_folder.iter().find(|(_, given)| *given) {
                return Err(SettingsError::FolderOnly { key }.to_string());
            }
        }
        if let DatasetSource::Synthetic(synthetic) = &mut c.dataset {
            if let Some(ids) = self.ids {
                synthetic.machine_ids = ids;
            }
            if let Some(n) = self.train_clips {
                synthetic.train_per_id = n;
            }
            if let Some(n) = self.test_clips {
                synthetic.test_normal_per_id = n;
                synthetic.test_anomaly_per_id = n;
            }
        }
        let set = |slot: &mut usize, v: Option<usize>| {
            if let Some(v) = v {
                *slot = v;
            }
        };
        set(&mut c.micro_batch, self.batch);
        set(&mut c.n_patches, self.patches);
        set(&mut c.accumulation, self.accumulation);
        if let Some(steps) = self.steps {
            c.length = RunLength::Steps(steps);
        }
        if let Some(seed) = self.seed {
            c.seed = seed;
        }
        if let Some(lr) = self.lr {
            c.lr = lr;
        }
        Ok(c)
    }

    /// What a run resumed from a checkpoint of `saved` takes from the address, as
    /// `trainer-cli train --resume` takes its flags: the backend, and `steps` as the run's new
    /// length. A setting that would make it another run (model, seed, learning rate, patches,
    /// the effective batch, the built-in dataset's size) is refused where it differs from the
    /// saved run's, named; one equal to it is fine (the link the run started from).
    pub fn resume_changes(
        &self,
        saved: &TrainConfig,
        backend: BackendKind,
    ) -> Result<ResumeChanges, SettingsError> {
        let identity = Identity {
            model: self.model.clone(),
            lr: self.lr,
            seed: self.seed,
            n_patches: self.patches,
            micro_batch: self.batch,
            accumulation: self.accumulation,
            machine_ids: self.ids,
            train_clips_per_id: self.train_clips,
            test_clips_per_id: self.test_clips,
            ..Identity::default()
        };
        let refused: Vec<String> = identity.refusals(saved).iter().map(refusal_words).collect();
        if !refused.is_empty() {
            return Err(SettingsError::ChangesResumedRun {
                changes: refused.join(", "),
            });
        }
        Ok(ResumeChanges {
            target: Some(Target::from(backend)),
            length: self.steps.map(RunLength::Steps),
            ..ResumeChanges::default()
        })
    }

    /// The planner's request, `None` with plan=0: the effective batch the split describes
    /// (the model's defaults where it is open), every part given kept as a constraint.
    pub fn planning(
        &self,
        budget_bytes: u64,
        defaults: DefaultBatch,
    ) -> Result<Option<Planning>, SettingsError> {
        if !self.plan {
            return Ok(None);
        }
        let fixed = Fixed {
            micro_batch: self.batch,
            n_patches: self.patches,
            accumulation: self.accumulation,
            checkpointing: None,
            precision: None,
        };
        let planning = Planning::new(budget_bytes, None, fixed, defaults).map_err(|error| {
            let RequestError::Zero(part) = error;
            let key = key(part);
            SettingsError::Zero { key }
        })?;
        Ok(Some(planning))
    }
}

/// The address' key that sets `setting`; a setting the address has no key for, in words.
fn key(setting: Setting) -> &'static str {
    match setting {
        Setting::Model => "model",
        Setting::LearningRate => "lr",
        Setting::Seed => "seed",
        Setting::MicroBatch => "batch",
        Setting::Accumulation => "accumulation",
        Setting::PatchesPerSpectrogram => "patches",
        Setting::MicroBatchTimesAccumulation => "batch x accumulation x patches",
        Setting::MachineIds => "ids",
        Setting::TrainClipsPerId => "train_clips",
        Setting::TestClipsPerId => "test_clips",
        Setting::MemoryBudget => "budget",
        Setting::PlannerOff => "plan=0",
        Setting::Resample => "resample=1",
        Setting::SampleRate => "sample_rate",
        other => other.words(),
    }
}

/// Core's settings as the address' keys, in an error's words.
pub struct Keys;

impl Wording for Keys {
    fn setting(&self, setting: Setting) -> String {
        let key = key(setting);
        if key == setting.words() {
            key.to_string()
        } else {
            format!("`{key}`")
        }
    }
}

/// A refused setting in the words of the address' key.
fn refusal_words(refusal: &Refusal) -> String {
    let key = key(refusal.setting);
    match &refusal.saved {
        Saved::Value(was) => format!("`{key}={}` (the run has {was})", refusal.given),
        Saved::Recordings(root) => format!(
            "`{key}={}` (the run reads the recordings in {})",
            refusal.given,
            root.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_errors_name_the_address_keys() {
        use headroom_core::setting::Described;
        let error = headroom_core::TrainError::NonFinite {
            step: 3,
            loss: f64::NAN,
        };
        let said = error.describe(&Keys);
        assert!(said.contains("lower `lr`"), "{said}");
        assert!(error.to_string().contains("lower the learning rate"));
    }

    #[test]
    fn an_address_sets_the_run_and_leaves_the_rest_to_the_defaults() {
        let s =
            PageSettings::parse("?backend=cpu&steps=40&start=1&seed=7&budget=512MiB&test_clips=3")
                .unwrap();
        assert_eq!(s.backend, WebBackend::Cpu);
        assert!(s.start && s.plan && s.eval);
        assert_eq!(s.steps, Some(40));
        assert_eq!(s.budget_bytes, Some(512 << 20));
        let c = s.train_config(BackendKind::Flex, None).unwrap();
        assert_eq!(c.length, RunLength::Steps(40));
        assert_eq!(c.seed, 7);
        assert_eq!(c.micro_batch, TrainConfig::default().micro_batch);
        let DatasetSource::Synthetic(synthetic) = c.dataset else {
            panic!("the page trains on the built-in dataset")
        };
        assert_eq!(
            (synthetic.test_normal_per_id, synthetic.test_anomaly_per_id),
            (3, 3)
        );
        assert_eq!(PageSettings::parse("").unwrap().backend, WebBackend::Auto);
    }

    #[test]
    fn a_picked_folder_is_the_run_s_data_root_and_takes_its_own_settings() {
        let s = PageSettings::parse("machine_type=fan&resample=1&sample_rate=22050").unwrap();
        let c = s.train_config(BackendKind::Flex, Some("dev_data")).unwrap();
        let DatasetSource::Dcase {
            root,
            machine_type,
            features,
        } = &c.dataset
        else {
            panic!("a picked folder is a DCASE dataset: {:?}", c.dataset)
        };
        assert_eq!(root, std::path::Path::new("dev_data"));
        assert_eq!(machine_type.as_deref(), Some("fan"));
        assert!(features.resample);
        assert_eq!(features.logmel.sample_rate, 22_050);
        assert_eq!(c.dataset.mels(), TrainConfig::default().dataset.mels());
        let folder_only = s.train_config(BackendKind::Flex, None).unwrap_err();
        assert!(folder_only.contains("`machine_type`"), "{folder_only}");
        let built_in_only = PageSettings::parse("ids=2")
            .unwrap()
            .train_config(BackendKind::Flex, Some("dev_data"))
            .unwrap_err();
        assert!(built_in_only.contains("`ids`"), "{built_in_only}");
    }

    #[test]
    fn a_given_split_is_kept_by_the_planner_and_required_without_it() {
        let defaults = DefaultBatch {
            spectrograms: 8,
            patches: 4,
        };
        let s = PageSettings::parse("batch=2&accumulation=3").unwrap();
        let planning = s.planning(1 << 30, defaults).unwrap().unwrap();
        assert_eq!(planning.effective_batch, 2 * 4 * 3);
        assert_eq!(planning.fixed.micro_batch, Some(2));
        assert_eq!(planning.fixed.n_patches, None);
        assert_eq!(
            PageSettings::parse("plan=0&batch=2"),
            Err(SettingsError::SplitNeeded)
        );
        let fixed = PageSettings::parse("plan=0&batch=2&patches=4&accumulation=1").unwrap();
        assert!(fixed.planning(1 << 30, defaults).unwrap().is_none());
    }

    #[test]
    fn bad_addresses_name_the_setting_and_what_it_takes() {
        let unknown = PageSettings::parse("stpes=40").unwrap_err().to_string();
        assert!(
            unknown.contains("`stpes`") && unknown.contains("steps"),
            "{unknown}"
        );
        let backend = PageSettings::parse("backend=cuda").unwrap_err().to_string();
        assert!(backend.contains("backend=cuda") && backend.contains("webgpu"));
        assert_eq!(
            PageSettings::parse("steps=0"),
            Err(SettingsError::Zero { key: "steps" })
        );
        assert!(PageSettings::parse("budget=lots").is_err());
        assert!(PageSettings::parse("lr=-1").is_err());
        let model = PageSettings::parse("model=resnet")
            .unwrap()
            .train_config(BackendKind::Flex, None)
            .unwrap_err();
        assert!(model.contains("resnet"), "{model}");
    }

    #[test]
    fn a_resumed_run_takes_the_backend_and_length_and_refuses_what_would_change_it() {
        let mut saved = PageSettings::parse("steps=4&seed=7&ids=1")
            .unwrap()
            .train_config(BackendKind::Flex, None)
            .unwrap();
        saved.micro_batch = 2;
        saved.accumulation = 1;
        // The link the run started from, with a longer run.
        let same = PageSettings::parse("steps=10&seed=7&ids=1").unwrap();
        let changes = same.resume_changes(&saved, BackendKind::Wgpu).unwrap();
        assert_eq!(changes.length, Some(RunLength::Steps(10)));
        assert_eq!(changes.target, Some(Target::from(BackendKind::Wgpu)));
        let quiet = PageSettings::parse("").unwrap();
        assert_eq!(
            quiet
                .resume_changes(&saved, BackendKind::Flex)
                .unwrap()
                .length,
            None
        );
        let other = PageSettings::parse("seed=8&ids=2&model=dcase-ae&batch=4&accumulation=1")
            .unwrap()
            .resume_changes(&saved, BackendKind::Flex)
            .unwrap_err()
            .to_string();
        for named in [
            "`seed=8` (the run has 7)",
            "`ids=2` (the run has 1)",
            "`model=dcase-ae`",
        ] {
            assert!(other.contains(named), "{named}: {other}");
        }
        assert!(other.contains("batch x accumulation x patches"), "{other}");
        let folder = PageSettings::parse("")
            .unwrap()
            .train_config(BackendKind::Flex, Some("dev_data"))
            .unwrap();
        let built_in = PageSettings::parse("test_clips=3")
            .unwrap()
            .resume_changes(&folder, BackendKind::Flex)
            .unwrap_err()
            .to_string();
        assert!(
            built_in.contains("`test_clips=3` (the run reads the recordings in dev_data)"),
            "{built_in}"
        );
    }
}
