//! A run's settings from the page's address (`?backend=cpu&steps=40&start=1`): what a test or
//! a teacher's link starts a run with. The keys are `trainer-cli train`'s flags, shortened.

use headroom_core::RunLength;
use headroom_core::classifier::ClassifierArch;
use headroom_core::setting::{Setting, Wording};
use headroom_core::size::parse_size;
use headroom_core::spec::{BudgetSpec, ClassifierSpec, DataSpec, MemorySpec, RunSpec, SplitSpec};

/// Where the page trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WebBackend {
    /// WebGPU when the browser has an adapter, the CPU otherwise.
    #[default]
    Auto,
    /// WebAssembly on the CPU (burn's flex), on as many threads as the page has (`threads`).
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
    (
        "classifier",
        "vit or cnn: the network of model=spec-classifier",
    ),
    (
        "sample_len",
        "samples in one crop of model=sashimi, a multiple of 16",
    ),
    (
        "mixtures",
        "components of model=sashimi's mixture-of-logistics head (the seed's 6)",
    ),
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
    (
        "threads",
        "CPU threads of a run on the CPU (default: every core the browser reports)",
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
    pub classifier: Option<ClassifierArch>,
    pub sample_len: Option<usize>,
    pub mixtures: Option<usize>,
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
    pub threads: Option<usize>,
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
                "classifier" => {
                    s.classifier = Some(match v.to_ascii_lowercase().as_str() {
                        "vit" => ClassifierArch::Vit,
                        "cnn" => ClassifierArch::Cnn,
                        _ => {
                            return Err(SettingsError::Invalid {
                                key: "classifier",
                                value: v.to_string(),
                                what: "vit or cnn",
                            });
                        }
                    })
                }
                "sample_len" => s.sample_len = Some(positive("sample_len", v)?),
                "mixtures" => s.mixtures = Some(positive("mixtures", v)?),
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
                "threads" => s.threads = Some(positive("threads", v)?),
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

    /// The threads a run on the CPU takes: the address's `threads`, or `cores` (also for
    /// an address that the run will reject, in its own words), at least one.
    pub fn cpu_threads(query: &str, cores: usize) -> usize {
        Self::parse(query)
            .ok()
            .and_then(|s| s.threads)
            .unwrap_or(cores)
            .max(1)
    }

    /// The run the address asks for, as core's spec, which core turns into the run's
    /// configuration, the planner's request and a resumed run's changes as it does
    /// trainer-cli's flags: `picked` is the name of the folder the user picked, which stands
    /// for the data root, `None` for the built-in dataset.
    pub fn spec(&self, picked: Option<&str>) -> RunSpec {
        RunSpec {
            model: self.model.clone(),
            classifier: ClassifierSpec {
                arch: self.classifier,
                ..ClassifierSpec::default()
            },
            data: DataSpec {
                root: picked.map(Into::into),
                machine_type: self.machine_type.clone(),
                n_mels: None,
                sample_rate: self.sample_rate,
                resample: self.resample,
                machine_ids: self.ids,
                train_clips_per_id: self.train_clips,
                test_clips_per_id: self.test_clips,
                // The page reads a picked folder's machine sounds; speech recordings are
                // read from disk by the command line only, so far.
                speech: None,
            },
            split: SplitSpec {
                micro_batch: self.batch,
                n_patches: self.patches,
                accumulation: self.accumulation,
                ..SplitSpec::default()
            },
            memory: MemorySpec {
                budget: self
                    .budget_bytes
                    .map_or(BudgetSpec::FreeMemory, |bytes| BudgetSpec::Given { bytes }),
                ..MemorySpec::default()
            },
            sashimi: headroom_core::spec::SashimiSpec {
                size: None,
                sample_len: self.sample_len,
                mixtures: self.mixtures,
                ..Default::default()
            },
            planner: self.plan,
            length: self.steps.map(RunLength::Steps),
            lr: self.lr,
            seed: self.seed,
            ..RunSpec::default()
        }
    }
}

/// The address' key that sets `setting`, where it has one.
fn key(setting: Setting) -> Option<&'static str> {
    Some(match setting {
        Setting::Model => "model",
        Setting::ClassifierArch => "classifier",
        Setting::SampleLen => "sample_len",
        Setting::Mixtures => "mixtures",
        Setting::LearningRate => "lr",
        Setting::Seed => "seed",
        Setting::MicroBatch => "batch",
        Setting::Accumulation => "accumulation",
        Setting::PatchesPerSpectrogram => "patches",
        Setting::MachineIds => "ids",
        Setting::TrainClipsPerId => "train_clips",
        Setting::TestClipsPerId => "test_clips",
        Setting::MemoryBudget => "budget",
        Setting::SampleRate => "sample_rate",
        Setting::MachineType => "machine_type",
        Setting::Steps => "steps",
        _ => return None,
    })
}

/// Core's settings as the address' keys, in an error's words; a setting the address has no
/// key for, as the page shows it, or in core's words.
pub struct Keys;

impl Wording for Keys {
    fn setting(&self, setting: Setting) -> String {
        if let Some(key) = key(setting) {
            return format!("`{key}`");
        }
        match setting {
            Setting::PlannerOff => "`plan=0`".into(),
            Setting::Resample => "`resample=1`".into(),
            Setting::DataRoot => "a picked folder (\"Choose a folder...\" beside Data)".into(),
            Setting::Resume => "the checkpoint".into(),
            other => other.words().into(),
        }
    }

    fn given(&self, setting: Setting, value: &str) -> String {
        match (key(setting), setting) {
            (Some(key), _) => format!("`{key}={value}`"),
            (None, Setting::Resample) => self.setting(setting),
            (None, _) => format!("{} {value}", self.setting(setting)),
        }
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::setting::Described;
    use headroom_core::train::DatasetSource;
    use headroom_core::{BackendKind, Target, TrainConfig};

    use super::*;

    fn flex() -> Target {
        BackendKind::Flex.into()
    }

    /// What core says about a run the address asks for, in the address' keys.
    fn config(query: &str, picked: Option<&str>) -> Result<TrainConfig, String> {
        let spec = PageSettings::parse(query).unwrap().spec(picked);
        spec.train_config(flex()).map_err(|e| e.describe(&Keys))
    }

    #[test]
    fn core_errors_name_the_address_keys() {
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
        let spec = s.spec(None);
        assert_eq!(spec.memory.budget, BudgetSpec::Given { bytes: 512 << 20 });
        let c = spec.train_config(flex()).unwrap();
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
        let query = "machine_type=fan&resample=1&sample_rate=22050";
        let c = config(query, Some("dev_data")).unwrap();
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
        let folder_only = config(query, None).unwrap_err();
        assert!(
            folder_only
                .starts_with("`machine_type` describes the recordings under a picked folder"),
            "{folder_only}"
        );
        let built_in_only = config("ids=2", Some("dev_data")).unwrap_err();
        assert!(
            built_in_only.starts_with("`ids` sizes the built-in dataset"),
            "{built_in_only}"
        );
    }

    #[test]
    fn a_given_split_is_kept_by_the_planner_and_required_without_it() {
        let spec = PageSettings::parse("batch=2&accumulation=3")
            .unwrap()
            .spec(None);
        let planning = spec.planning(1 << 30).unwrap().unwrap();
        let patches = TrainConfig::default().n_patches;
        assert_eq!(planning.effective_batch, 2 * patches * 3);
        assert_eq!(planning.fixed.micro_batch, Some(2));
        assert_eq!(planning.fixed.n_patches, None);
        assert_eq!(
            PageSettings::parse("plan=0&batch=2"),
            Err(SettingsError::SplitNeeded)
        );
        let fixed = PageSettings::parse("plan=0&batch=2&patches=4&accumulation=1").unwrap();
        assert!(fixed.spec(None).planning(1 << 30).unwrap().is_none());
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
        assert_eq!(
            PageSettings::parse("threads=0"),
            Err(SettingsError::Zero { key: "threads" })
        );
        assert!(PageSettings::parse("threads=all").is_err());
        assert_eq!(PageSettings::cpu_threads("threads=3&steps=4", 8), 3);
        assert_eq!(PageSettings::cpu_threads("steps=4", 8), 8);
        assert_eq!(PageSettings::cpu_threads("threads=0", 8), 8);
        assert_eq!(PageSettings::cpu_threads("", 0), 1);
        assert!(PageSettings::parse("lr=-1").is_err());
        let model = config("model=resnet", None).unwrap_err();
        assert!(model.contains("resnet"), "{model}");
        let arch = PageSettings::parse("classifier=resnet")
            .unwrap_err()
            .to_string();
        assert!(
            arch.contains("classifier=resnet") && arch.contains("vit or cnn"),
            "{arch}"
        );
        // The classifier's network is for the classifier alone, said with the page's key.
        let other = config("classifier=cnn", None).unwrap_err();
        assert!(other.contains("`classifier`"), "{other}");
    }

    #[test]
    fn the_classifier_takes_its_network_from_the_address() {
        use headroom_core::classifier::ClassifierConfig;
        let c = config("model=spec-classifier&classifier=cnn", None).unwrap();
        let task: ClassifierConfig = c.model.config().unwrap();
        assert_eq!(task.arch, ClassifierArch::Cnn);
        assert!(task.generated.is_none());
    }

    #[test]
    fn the_sashimi_model_takes_its_crop_from_the_address() {
        use headroom_core::waveform::SashimiConfig;
        let c = config("model=sashimi&sample_len=4096&mixtures=6", None).unwrap();
        let task: SashimiConfig = c.model.config().unwrap();
        assert_eq!(task.sample_len, 4096);
        assert_eq!(task.shape.mixtures, 6);
        let uneven = config("model=sashimi&sample_len=1000", None).unwrap_err();
        assert!(
            uneven.contains("`sample_len`") && uneven.contains("multiple of 16"),
            "{uneven}"
        );
    }

    #[test]
    fn a_resumed_run_takes_the_backend_and_length_and_refuses_what_would_change_it() {
        let mut saved = config("steps=4&seed=7&ids=1", None).unwrap();
        saved.micro_batch = 2;
        saved.accumulation = 1;
        let resume = |query: &str, backend: BackendKind| {
            let spec = PageSettings::parse(query).unwrap().spec(None);
            spec.resume(&saved, Some(backend.into()))
                .map_err(|e| e.describe(&Keys))
        };
        // The link the run started from, with a longer run.
        let changes = resume("steps=10&seed=7&ids=1", BackendKind::Wgpu)
            .unwrap()
            .changes;
        assert_eq!(changes.length, Some(RunLength::Steps(10)));
        assert_eq!(changes.target, Some(Target::from(BackendKind::Wgpu)));
        assert_eq!(resume("", BackendKind::Flex).unwrap().changes.length, None);
        // A link without the planner, repeated: its split is the run's.
        assert!(resume("plan=0&batch=2&patches=4&accumulation=1", BackendKind::Flex).is_ok());
        let other = resume(
            "seed=8&ids=2&model=dcase-ae&batch=4&accumulation=1",
            BackendKind::Flex,
        )
        .unwrap_err();
        assert!(
            other.starts_with("the checkpoint continues the saved run"),
            "{other}"
        );
        for named in [
            "`seed=8` (the run has 7)",
            "`ids=2` (the run has 1)",
            "`model=dcase-ae`",
            "`batch=4` with `accumulation=1` (an effective batch of",
        ] {
            assert!(other.contains(named), "{named}: {other}");
        }
        let folder = config("", Some("dev_data")).unwrap();
        let built_in = PageSettings::parse("test_clips=3")
            .unwrap()
            .spec(None)
            .resume(&folder, None)
            .unwrap_err()
            .describe(&Keys);
        assert!(
            built_in.contains("`test_clips=3` (the run reads the recordings under dev_data)"),
            "{built_in}"
        );
    }
}
