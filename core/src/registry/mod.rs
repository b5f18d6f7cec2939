//! The kinds of training Headroom has built in, by the name a run spec's `model` gives and a
//! checkpoint records: the one list a new kind joins ([`with_default`]). Front-ends start,
//! resume, plan, time and list runs through it by name ([`Trainer`], [`plan_only`],
//! [`evaluate_checkpoint`], [`built_in`]) and never name a kind's type.
//!
//! Why a visitor ([`WithTask`]) rather than trait objects: burn's `Module` is not
//! object-safe, and a run's task is fixed when it starts, so the engine is generic over the
//! task and the name picks the type once.

mod by_name;
mod trainer;

use crate::classifier::ClassifierConfig;
use crate::config::TrainConfig;
use crate::contrastive::ContrastiveConfig;
use crate::gan::GanConfig;
use crate::model::{
    DcaseAeConfig, IdClassifierConfig, ModelError, ModelInfo, ModelSpec, NamedConfig,
    VqAutoencoderConfig,
};
use crate::speech::AsrConfig;
pub use crate::train::BuiltIn;
use crate::waveform::SashimiConfig;

#[cfg(not(target_arch = "wasm32"))]
pub use by_name::{evaluate_checkpoint, plan_only};
pub use by_name::{evaluate_checkpoint_async, plan_only_async};
pub use trainer::{Run, Trainer};

/// Something done with a built-in task chosen by name: [`with_default`] calls `run` with
/// its configuration.
pub trait WithTask {
    type Output;
    fn run<T: BuiltIn>(self, task: T) -> Self::Output;
}

/// Declares the built-in tasks, the default first: [`with_default`] picks one by name and
/// [`NAMES`] lists them.
macro_rules! built_in_tasks {
    ($($task:ty),+ $(,)?) => {
        /// Runs `action` with the default configuration of the built-in task `name`.
        pub fn with_default<W: WithTask>(name: &str, action: W) -> Result<W::Output, ModelError> {
            $(
                if name == <$task as NamedConfig>::NAME {
                    return Ok(action.run(<$task>::default()));
                }
            )+
            Err(unknown(name))
        }

        /// Every built-in task's name, the default first.
        const NAMES: &[&str] = &[$(<$task as NamedConfig>::NAME),+];
    };
}

// Adding a kind of training is a line here.
built_in_tasks![
    VqAutoencoderConfig,
    DcaseAeConfig,
    IdClassifierConfig,
    AsrConfig,
    GanConfig,
    ClassifierConfig,
    ContrastiveConfig,
    SashimiConfig,
];

/// Runs `action` with the built-in task `spec` names, its saved configuration read.
pub fn with_saved<W: WithTask>(spec: &ModelSpec, action: W) -> Result<W::Output, ModelError> {
    /// The configuration type `with_default` picks by name, read from the spec instead.
    struct Saved<'a, W>(&'a ModelSpec, W);
    impl<W: WithTask> WithTask for Saved<'_, W> {
        type Output = Result<W::Output, ModelError>;
        fn run<T: BuiltIn>(self, _: T) -> Self::Output {
            Ok(self.1.run(self.0.config::<T>()?))
        }
    }
    with_default(&spec.name, Saved(spec, action))?
}

/// The built-in tasks, the default first.
pub fn built_in() -> Vec<ModelInfo> {
    NAMES.iter().filter_map(|name| info_of(name).ok()).collect()
}

/// The built-in task `name`, as `trainer-cli models` lists it.
pub fn info_of(name: &str) -> Result<ModelInfo, ModelError> {
    struct Info;
    impl WithTask for Info {
        type Output = ModelInfo;
        fn run<T: BuiltIn>(self, task: T) -> ModelInfo {
            task.info()
        }
    }
    with_default(name, Info)
}

/// The default configuration of the built-in task `name`, as a run saves it.
pub fn default_spec(name: &str) -> Result<ModelSpec, ModelError> {
    struct Spec;
    impl WithTask for Spec {
        type Output = ModelSpec;
        fn run<T: BuiltIn>(self, task: T) -> ModelSpec {
            ModelSpec::of(&task)
        }
    }
    with_default(name, Spec)
}

/// Makes `config` train the built-in task `name` with its defaults ([`BuiltIn::configure`]).
pub fn configure(config: &mut TrainConfig, name: &str) -> Result<(), ModelError> {
    struct Configure<'a>(&'a mut TrainConfig);
    impl WithTask for Configure<'_> {
        type Output = ();
        fn run<T: BuiltIn>(self, task: T) {
            task.configure(self.0);
        }
    }
    with_default(name, Configure(config))
}

fn unknown(name: &str) -> ModelError {
    ModelError::Unknown {
        name: name.to_string(),
        known: NAMES.join(", "),
    }
}
