//! Command-line flags. Kebab-case, with the seed documents' snake_case spellings accepted
//! as aliases so their commands work as written.

mod commands;
mod device;
mod train;

use clap::{Parser, Subcommand};

pub use commands::{BenchArgs, EvalArgs, FeaturesArgs, ModelsArgs, PlanArgs, ProbeArgs, SynthArgs};
pub use device::{Backend, Resolved};
pub use train::{DataArgs, MemoryArgs, SplitArgs, TrainArgs};

#[derive(Parser, Debug)]
#[command(
    name = "trainer-cli",
    version,
    about = "Headroom: train spectrogram models without running out of memory"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train a model (default: the VQ patch autoencoder; see `models`); with no flags, on
    /// the built-in synthetic dataset, on the device --backend auto picks.
    Train(Box<TrainArgs>),
    /// Time training steps of a model on random patches (one JSON line with --json).
    Bench(BenchArgs),
    /// Show the plan a run would train with and its memory breakdown, or (--what-if) the plans
    /// for common GPUs and this CPU.
    Plan(Box<PlanArgs>),
    /// List the devices Headroom could train on, their memory, and what --backend auto picks.
    Probe(ProbeArgs),
    /// Write the built-in synthetic dataset as WAV files in the DCASE 2020 Task 2 layout.
    Synth(SynthArgs),
    /// Compute the log-mel spectrogram of one WAV file and save it as [n_mels, frames] .npy.
    Features(FeaturesArgs),
    /// Score a dataset's test clips with a trained model: the challenge's per-clip score files
    /// and AUC/pAUC per machine type and ID (table, CSV and JSON).
    Eval(Box<EvalArgs>),
    /// List the models --model takes, with their parameter counts and inputs.
    Models(ModelsArgs),
}

impl Default for Command {
    fn default() -> Self {
        Command::Train(Box::default())
    }
}
