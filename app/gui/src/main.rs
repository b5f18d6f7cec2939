//! `trainer-gui`: opens the app window; without a display, says to use trainer-cli.

use headroom_core::memory::alloc::CountingAllocator;
use trainer_gui::{HeadroomApp, Settings};

// Host-memory figures on CPU backends come from counting every allocation.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator(std::alloc::System);

fn has_display() -> bool {
    if cfg!(any(target_os = "windows", target_os = "macos")) {
        return true;
    }
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

const USAGE: &str = "usage: trainer-gui [--data-root DIR] [--speech-train MANIFEST_OR_FOLDER] \
                     [--config RUN_FILE] [--steps N] [--runs DIR] [--events FILE] [--start]";

/// The few flags the app takes: what to open, how long to train, and whether to start.
fn settings_from_args() -> anyhow::Result<Settings> {
    let mut settings = Settings::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value; {USAGE}"))
        };
        match arg.as_str() {
            "--start" => settings.autostart = true,
            "--data-root" => settings.data_root = Some(value("--data-root")?.into()),
            "--speech-train" => settings.speech_train = Some(value("--speech-train")?.into()),
            "--runs" => settings.runs_dir = value("--runs")?.into(),
            "--config" => settings.run_file = Some(value("--config")?.into()),
            "--events" => settings.events_file = Some(value("--events")?.into()),
            "--steps" => {
                let text = value("--steps")?;
                settings.steps_given = true;
                settings.steps = text.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    anyhow::anyhow!("--steps takes a positive number (got {text:?})")
                })?;
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other:?}; {USAGE}"),
        }
    }
    Ok(settings)
}

/// A user's error is printed as words, whatever `RUST_BACKTRACE` says (anyhow would print its
/// backtrace through `Debug`); a panic still prints its own.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    headroom_core::memory::alloc::keep_freed_memory();
    // The GPU half of the probe, run by this binary in a child process (jobs::probe).
    if let Some(settings) = headroom_core::probe::isolate::child_settings(std::env::args().skip(1))
    {
        return Ok(headroom_core::probe::isolate::answer(settings)?);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(headroom_core::probe::DEFAULT_LOG_FILTER)
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    if !has_display() {
        eprintln!(
            "trainer-gui needs a display (neither DISPLAY nor WAYLAND_DISPLAY is set).\n\
             Train from a terminal instead: trainer-cli train --backend auto\n\
             (cargo run --release -p trainer-cli -- train --backend auto)"
        );
        std::process::exit(2);
    }
    let settings = settings_from_args()?;
    let options = eframe::NativeOptions {
        viewport: eframe::egui::ViewportBuilder::default()
            .with_title("Headroom")
            .with_inner_size([1280.0, 860.0])
            .with_drag_and_drop(true),
        ..Default::default()
    };
    eframe::run_native(
        "Headroom",
        options,
        Box::new(|cc| Ok(Box::new(HeadroomApp::new(&cc.egui_ctx, settings)))),
    )
    .map_err(|e| anyhow::anyhow!("cannot open the window: {e}"))
}
