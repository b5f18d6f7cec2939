//! Work that must not block the UI, each on its own thread: probing the machine, reading a
//! dataset's index and checking its files, calibrating the planner, training. Results come
//! back as [`Message`]s on one channel; the UI thread drains it every frame.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use eframe::egui;
use headroom_core::auto;
use headroom_core::events::Event;
use headroom_core::model::{ModelConfig, VqAutoencoderConfig};
use headroom_core::plan::Calibration;
use headroom_core::probe::{MachineReport, gpus::ProbeSettings, isolate};
use headroom_core::registry::{BuiltIn, WithTask, with_default};
use headroom_core::train::Evaluation;
use headroom_core::{RunOptions, Target, TrainConfig, Trainer};
use headroom_datasets::dcase;
use headroom_datasets::{ClipReader, FeatureSettings, Prefetch, SyntheticConfig, SyntheticDataset};

use crate::dataset::DatasetSummary;
use crate::pacer::RepaintPacer;

pub enum Message {
    Probed(Box<(MachineReport, auto::Choice)>),
    Scanned(Result<DatasetSummary, String>),
    /// Files the check pass could not read, as it finds them; then `FilesChecked`.
    BadFile(String),
    FilesChecked {
        checked: usize,
    },
    /// A device's calibration for a model (by name).
    Calibrated(Target, String, Result<Calibration, String>),
    Event(Event),
    Evaluated(Box<Evaluation>),
    TrainingEnded(Result<(), String>),
}

impl Message {
    /// Whether the window shows this at once: everything but a step's figures and a file
    /// check's findings, which come in bursts and are shown at a bounded rate (`pacer`).
    pub fn urgent(&self) -> bool {
        !matches!(
            self,
            Message::Event(
                Event::Step(_)
                    | Event::MemoryCleanup { .. }
                    | Event::Epoch { .. }
                    | Event::Picture(_)
            ) | Message::BadFile(_)
        )
    }
}

/// Sends messages and wakes the UI for them: at once for a change of what the app is doing,
/// at most once a [`crate::pacer::STEP_INTERVAL`] for step events.
#[derive(Clone)]
pub struct Outbox {
    sender: Sender<Message>,
    ctx: egui::Context,
    pacer: Arc<Mutex<RepaintPacer>>,
}

impl Outbox {
    pub fn new(sender: Sender<Message>, ctx: egui::Context) -> Self {
        Self {
            sender,
            ctx,
            pacer: Default::default(),
        }
    }

    fn pacer(&self) -> MutexGuard<'_, RepaintPacer> {
        // The pacer holds two instants: one a panic left behind is as good as any.
        self.pacer.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn send(&self, message: Message) {
        let urgent = message.urgent();
        // The app closed: nobody is left to tell.
        let _ = self.sender.send(message);
        let delay = self.pacer().arrived(Instant::now(), urgent);
        match delay {
            Some(Duration::ZERO) => self.ctx.request_repaint(),
            Some(delay) => self.ctx.request_repaint_after(delay),
            None => {}
        }
    }

    /// Repaints for step events at most once `interval` (`pacer::interval_for`).
    pub fn set_interval(&self, interval: Duration) {
        self.pacer().set_interval(interval);
    }

    /// The window drew a frame: what was sent before it is shown.
    pub fn painted(&self) {
        self.pacer().painted(Instant::now());
    }
}

pub fn probe(outbox: Outbox) {
    std::thread::spawn(move || {
        let settings = ProbeSettings {
            allocation_cap: None,
            software_adapters: false,
        };
        let report = isolate::probe_machine(isolate::TIMEOUT, settings);
        // As trainer-cli's --backend auto: where a GPU fits, a few timed steps of the default
        // model on it and on the CPU decide.
        let choice = auto::resolve(&report, VqAutoencoderConfig::NAME);
        outbox.send(Message::Probed(Box::new((report, choice))));
    });
}

/// Reads a folder's index at once, then reads every clip on worker threads and reports the
/// ones that fail, so problems show up while the user looks at the summary.
pub fn scan(outbox: Outbox, root: PathBuf, features: FeatureSettings) {
    std::thread::spawn(move || {
        let index = match dcase::scan(&root, None) {
            Ok(index) => index,
            Err(e) => return outbox.send(Message::Scanned(Err(e.to_string()))),
        };
        let summary = DatasetSummary::from_index(&index);
        outbox.send(Message::Scanned(Ok(summary)));
        let reader = Arc::new(ClipReader::new(features));
        let clips = index.clips;
        let count = clips.len();
        let results = Prefetch::new(clips.into_iter(), 2, 8, move |clip| {
            reader.read(&clip).err().map(|e| e.to_string())
        });
        for problem in results.flatten() {
            outbox.send(Message::BadFile(problem));
        }
        outbox.send(Message::FilesChecked { checked: count });
    });
}

/// The built-in dataset's summary (it has no files to check).
pub fn synthetic_summary(config: &SyntheticConfig) -> DatasetSummary {
    DatasetSummary::from_clips(
        "built-in synthetic machine sounds".into(),
        None,
        &SyntheticDataset::index(config),
    )
}

/// Calibrates the planner for the built-in model `model` on `target`.
pub fn calibrate(outbox: Outbox, target: Target, model: String) {
    struct Calibrate(Target);
    impl WithTask for Calibrate {
        type Output = Result<Calibration, String>;
        fn run<T: BuiltIn>(self, model: T) -> Self::Output {
            headroom_core::readback::block_on(headroom_core::plan::calibrate(self.0, &model))
                .map_err(|e| e.to_string())
        }
    }
    std::thread::spawn(move || {
        let result = with_default(&model, Calibrate(target)).unwrap_or_else(|e| Err(e.to_string()));
        outbox.send(Message::Calibrated(target, model, result));
    });
}

/// Flags the UI holds to steer a run.
#[derive(Clone, Default)]
pub struct RunControl {
    pub stop: Arc<AtomicBool>,
    pub pause: Arc<AtomicBool>,
}

/// Trains, then scores the test split, on a thread of its own. With `events_file`, every
/// event is also written there as a JSON line, as `trainer-cli train --json` prints them
/// (`trainer-gui --events FILE`, which bench/gui_vs_cli reads).
pub fn train(
    outbox: Outbox,
    config: TrainConfig,
    mut options: RunOptions,
    control: RunControl,
    events_file: Option<PathBuf>,
) {
    options.stop = Some(control.stop);
    options.pause = Some(control.pause);
    std::thread::spawn(move || {
        // The run inside the compute pool, on one of its threads: called from outside it,
        // each of a step's parallel ops would wake a worker and sleep until it finished
        // (as trainer-cli, whose main thread is one of the pool's; docs/BENCHMARKS.md).
        let result = rayon::scope(|_| -> Result<(), String> {
            let mut file = match &events_file {
                Some(path) => Some(std::io::LineWriter::new(
                    std::fs::File::create(path)
                        .map_err(|e| format!("cannot write events to {}: {e}", path.display()))?,
                )),
                None => None,
            };
            let mut trainer = Trainer::new(config, options).map_err(|e| e.to_string())?;
            let events = outbox.clone();
            let mut sink = move |event: Event| {
                if let Some(f) = &mut file {
                    let written = serde_json::to_string(&event)
                        .map_err(std::io::Error::other)
                        .and_then(|line| writeln!(f, "{line}"));
                    if let Err(e) = written {
                        tracing::warn!("events file: {e}; no more events written");
                        file = None;
                    }
                }
                events.send(Message::Event(event))
            };
            trainer.run(&mut sink).map_err(|e| e.to_string())?;
            let evaluation = trainer.evaluate().map_err(|e| e.to_string())?;
            outbox.send(Message::Event(evaluation.event()));
            outbox.send(Message::Evaluated(Box::new(evaluation)));
            Ok(())
        });
        outbox.send(Message::TrainingEnded(result));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_comes_in_bursts_is_paced_and_a_change_of_state_is_not() {
        assert!(!Message::Event(Event::MemoryCleanup { step: 3 }).urgent());
        assert!(!Message::BadFile("a.wav: truncated".into()).urgent());
        assert!(Message::TrainingEnded(Ok(())).urgent());
        assert!(Message::FilesChecked { checked: 4 }.urgent());
        assert!(
            Message::Event(Event::Checkpoint {
                step: 3,
                path: "c".into()
            })
            .urgent()
        );
    }
}
