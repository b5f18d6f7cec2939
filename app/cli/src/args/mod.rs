//! Command-line flags. Kebab-case, with the seed documents' snake_case spellings accepted
//! as aliases so their commands work as written.

mod commands;
mod device;
mod train;

use clap::parser::ValueSource;
use clap::{ArgMatches, Parser, Subcommand};

pub use commands::{
    BenchArgs, EvalArgs, FeaturesArgs, GenerateArgs, ModelsArgs, PlanArgs, ProbeArgs, SynthArgs,
};
pub use device::{Backend, DeviceArg, Resolved};
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
    /// Write audio made by a trained waveform model (sashimi) as WAV files, one sample at a
    /// time from its distribution.
    Generate(GenerateArgs),
}

impl Default for Command {
    fn default() -> Self {
        Command::Train(Box::default())
    }
}

/// The ids of `command`'s arguments given on the command line (not their defaults, nor the
/// groups clap makes of flattened flags).
pub fn given(command: &clap::Command, matches: &ArgMatches) -> Vec<String> {
    command
        .get_arguments()
        .map(|arg| arg.get_id().as_str())
        .filter(|id| matches.value_source(id) == Some(ValueSource::CommandLine))
        .map(str::to_string)
        .collect()
}

/// The command line parsed, a `train` command knowing which of its flags were given.
pub fn parse() -> Cli {
    parse_from(std::env::args_os())
}

/// [`parse`] of `line`.
pub fn parse_from<T: Into<std::ffi::OsString> + Clone>(line: impl IntoIterator<Item = T>) -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let command = Cli::command();
    let matches = command.clone().get_matches_from(line);
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(Command::Train(train)) = &mut cli.command
        && let (Some(matches), Some(command)) = (
            matches.subcommand_matches("train"),
            command.find_subcommand("train"),
        )
    {
        train.given = given(command, matches);
    }
    cli
}
