//! `trainer-cli`: Headroom from the command line. A thin layer over `headroom-core`:
//! it parses flags, renders the engine's events, and owns nothing else.

mod args;
mod bench;
mod budget;
mod datasets;
mod device_panics;
mod flags;
mod generate;
mod kept;
mod models;
mod plan;
mod probe;
mod render;
mod report;
mod run_file;
mod spec;
mod train;
mod what_if_calibration;
mod what_if_lengths;

use std::process::ExitCode;

use anyhow::Result;
use headroom_core::BackendKind;
use headroom_core::memory::alloc::CountingAllocator;
use headroom_core::probe::isolate;

// Host-memory figures on CPU backends come from counting every allocation.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator(std::alloc::System);

/// A user's error is printed as words, whatever `RUST_BACKTRACE` says: anyhow would print its
/// backtrace through `Debug`. A panic still prints its own through the panic hook.
fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", flags::error_words(&error));
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    headroom_core::memory::alloc::keep_freed_memory();
    // The GPU half of a probe, run by this binary in a child process so that a driver fault
    // cannot take the caller down.
    if let Some(settings) = isolate::child_settings(std::env::args().skip(1)) {
        return Ok(isolate::answer(settings)?);
    }
    // burn materialises loaded optimizer state on `Device::default()`, which in a build with
    // wgpu is a GPU adapter: resuming a CPU run would start a graphics driver just to move
    // the state back. BURN_DEVICE pins that default to the CPU unless the user set it.
    if std::env::var_os("BURN_DEVICE").is_none() {
        let cpu = if BackendKind::Flex.is_built() {
            "flex"
        } else {
            "ndarray"
        };
        // SAFETY: at the start of main, before any thread exists.
        unsafe { std::env::set_var("BURN_DEVICE", cpu) };
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(headroom_core::probe::DEFAULT_LOG_FILTER)
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    device_panics::quiet();
    let cli = args::parse();
    match cli.command.unwrap_or_default() {
        args::Command::Train(a) => train::run(*a),
        args::Command::Bench(a) => bench::run(a),
        args::Command::Plan(a) => plan::run(*a),
        args::Command::Probe(a) => probe::run(a),
        args::Command::Synth(a) => datasets::synth(a),
        args::Command::Features(a) => datasets::features(a),
        args::Command::Eval(a) => datasets::eval(*a),
        args::Command::Models(a) => models::run(a),
        args::Command::Generate(a) => generate::run(a),
    }
}

/// Sizes the thread pool burn's CPU backends compute on (`threads`, or rayon's default: one
/// per core), with this thread as one of its threads. A step's ops are called from this
/// thread: outside the pool, each parallel op would be handed to a sleeping worker while
/// this thread slept until it finished, two thread switches an op, about a tenth of a
/// dcase-ae step at 64 x 8 (perf: futex wake-ups and task switches; docs/BENCHMARKS.md).
/// In it, this thread works on its own op and the others join it, as OpenMP's threads
/// do in PyTorch.
pub(crate) fn set_threads(threads: Option<usize>) -> Result<usize> {
    let mut pool = rayon::ThreadPoolBuilder::new().use_current_thread();
    if let Some(n) = threads {
        pool = pool.num_threads(n);
    }
    if let Err(e) = pool.build_global() {
        // Without --threads a pool already built (by an earlier command) will do.
        if let Some(n) = threads {
            anyhow::bail!("cannot set --threads {n}: {e}");
        }
    }
    Ok(rayon::current_num_threads())
}
