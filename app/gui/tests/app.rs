//! The app driven through its accessibility tree (egui_kittest): it starts on the synthetic
//! dataset, trains on flex, shows measured memory under the budget, stops with a checkpoint,
//! re-plans when a value is pinned, and lists a dataset's bad files.

use std::path::Path;
use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use headroom_core::memory::alloc::CountingAllocator;
use trainer_gui::session::RunState;
use trainer_gui::{HeadroomApp, Settings};

// As in the app's binary: on CPU backends memory is measured by counting allocations.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator(std::alloc::System);

/// The allocation counter is the process's: a test that calibrates or trains must not share
/// it with another that does, or each measures the other's memory.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn measuring_alone() -> std::sync::MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|e| e.into_inner())
}

fn harness(runs_dir: &Path, steps: u64) -> Harness<'static, HeadroomApp> {
    let settings = Settings {
        probe_gpus: false,
        runs_dir: runs_dir.to_path_buf(),
        steps,
        ..Settings::default()
    };
    let app = HeadroomApp::new(&eframe::egui::Context::default(), settings);
    Harness::builder()
        .with_size([1280.0, 900.0])
        .build_ui_state(|ui, app: &mut HeadroomApp| app.ui(ui), app)
}

/// Steps the UI (background jobs report between frames) until `done` holds.
fn wait_for(
    harness: &mut Harness<'static, HeadroomApp>,
    what: &str,
    limit: Duration,
    done: impl Fn(&HeadroomApp) -> bool,
) {
    let started = Instant::now();
    while !done(harness.state()) {
        assert!(
            started.elapsed() < limit,
            "gave up waiting for {what}; the app says: {}",
            harness.state().status()
        );
        harness.step();
        std::thread::sleep(Duration::from_millis(50));
    }
    harness.step();
}

#[test]
fn trains_on_the_synthetic_dataset_shows_memory_under_the_budget_and_stops_with_a_checkpoint() {
    let _alone = measuring_alone();
    let runs = tempfile::tempdir().unwrap();
    let mut harness = harness(runs.path(), 500);
    harness.step();
    harness.get_by_label_contains("built-in synthetic machine sounds");
    harness.get_by_label_contains("(auto)");
    wait_for(
        &mut harness,
        "the calibration",
        Duration::from_secs(120),
        |app| app.plan().is_some_and(|p| p.is_ok()),
    );
    harness.get_by_label("predicted peak");

    harness.get_by_label("Start").click();
    wait_for(
        &mut harness,
        "three steps",
        Duration::from_secs(300),
        |app| app.session.step() >= 3,
    );
    let memory = *harness.state().session.latest_memory().unwrap();
    let budget = memory.budget.expect("the run has a budget");
    assert!(memory.allocated > 0, "allocated {}", memory.allocated);
    assert!(
        memory.peak >= memory.allocated && memory.peak < budget,
        "{memory:?}"
    );
    // The header and the event log name the device in words, not burn's Debug text.
    let status = harness.state().status().to_string();
    assert!(
        status.starts_with("Training vq-patch-ae on flex (CPU"),
        "{status}"
    );
    assert!(!status.contains("Device<"), "{status}");
    if let Some(brand) = headroom_core::probe::cpu::brand() {
        assert!(status.contains(&brand), "{status} does not name {brand}");
    }
    harness.get_by_label(&status);
    let log = &harness.state().session.log;
    let line = log
        .iter()
        .find(|l| l.starts_with("training vq-patch-ae on flex"))
        .expect("the run's device in the log");
    assert!(line.contains("CPU") && !line.contains("Device<"), "{line}");
    harness.get_by_label(line);
    // What the bars say, as text beside them.
    harness.get_by_label_contains("Device, measured at step");
    harness.get_by_label_contains("red line: budget");

    harness.get_by_label("Stop").click();
    wait_for(
        &mut harness,
        "the stop and the scoring",
        Duration::from_secs(300),
        |app| app.session.state == RunState::Finished && app.session.evaluation.is_some(),
    );
    let app = harness.state();
    assert!(
        app.session.step() < 500,
        "stopped early, at {}",
        app.session.step()
    );
    let checkpoint = app
        .session
        .checkpoints
        .last()
        .expect("a checkpoint was written");
    assert!(
        Path::new(checkpoint).join("model.safetensors").is_file(),
        "{checkpoint}"
    );
    // The run's directory holds its run file, as trainer-cli's runs do: it reads back as the
    // run's model.
    let run_dir = Path::new(checkpoint)
        .ancestors()
        .nth(2)
        .expect("OUT/checkpoints/step-N");
    let text = std::fs::read_to_string(run_dir.join("run.toml")).expect("the run's run.toml");
    let spec: headroom_core::spec::RunSpec = toml::from_str(&text).expect("a run file");
    assert_eq!(spec.model.as_deref(), Some("vq-patch-ae"), "{text}");
    assert!(text.contains("Written by trainer-gui"), "{text}");
    assert!(
        app.session.evaluation.is_some(),
        "the test split was scored"
    );
    harness.get_by_label("AUC");
}

#[test]
fn pinning_the_micro_batch_changes_the_predicted_memory() {
    let _alone = measuring_alone();
    let runs = tempfile::tempdir().unwrap();
    let mut harness = harness(runs.path(), 10);
    wait_for(
        &mut harness,
        "the calibration",
        Duration::from_secs(120),
        |app| app.plan().is_some_and(|p| p.is_ok()),
    );
    let predicted = |app: &HeadroomApp| app.plan().unwrap().unwrap().0.predicted_peak_bytes;
    // Precision and checkpointing pinned first (f32, off), so that only the micro-batch moves:
    // unpinned, timing noise in the calibration may pick either.
    harness.get_by_label("Pin precision").click();
    harness.get_by_label("Pin checkpointing").click();
    harness.get_by_label("Pin micro-batch").click();
    harness.step();
    let pins = harness.state().pins;
    assert!(pins.micro_batch.pinned && pins.precision.pinned && pins.checkpointing.pinned);
    assert_eq!(harness.state().plan().unwrap().unwrap().0.micro_batch, 8);
    let before = predicted(harness.state());
    harness.get_by_label(&trainer_gui::session::human(before));

    harness.state_mut().pins.micro_batch.value = 1;
    harness.step();
    harness.step();
    let after = predicted(harness.state());
    assert!(
        after < before,
        "micro-batch 1 predicts {after} bytes, micro-batch 8 {before}"
    );
    harness.get_by_label(&trainer_gui::session::human(after));
    assert_eq!(harness.state().plan().unwrap().unwrap().0.micro_batch, 1);
}

/// Another model in the picker is calibrated afresh, and its plan rests on its own steps:
/// the DCASE baseline's frame stacks cost a fraction of the default model's patches.
#[test]
fn choosing_another_model_plans_for_it() {
    let _alone = measuring_alone();
    let runs = tempfile::tempdir().unwrap();
    let mut harness = harness(runs.path(), 10);
    wait_for(
        &mut harness,
        "the calibration",
        Duration::from_secs(120),
        |app| app.plan().is_some_and(|p| p.is_ok()),
    );
    harness.get_by_label("The network to train");
    let default_peak = harness
        .state()
        .plan()
        .unwrap()
        .unwrap()
        .0
        .predicted_peak_bytes;
    harness.state_mut().model = "dcase-ae".into();
    harness.step();
    assert!(
        harness.state().plan().is_none(),
        "the default model's calibration must not plan dcase-ae"
    );
    wait_for(
        &mut harness,
        "dcase-ae's calibration",
        Duration::from_secs(120),
        |app| app.plan().is_some_and(|p| p.is_ok()),
    );
    let plan = harness.state().plan().unwrap().unwrap();
    assert!(
        plan.0.predicted_peak_bytes < default_peak,
        "dcase-ae {} against vq-patch-ae {default_peak}",
        plan.0.predicted_peak_bytes
    );
    assert_eq!(plan.1.parameters, 267_928 * 4);
}

#[test]
fn a_dataset_with_bad_files_lists_them() {
    let _alone = measuring_alone();
    use headroom_datasets::audio::{Audio, write_wav};
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("valve/train");
    std::fs::create_dir_all(&train).unwrap();
    std::fs::create_dir_all(dir.path().join("valve/test")).unwrap();
    let tone = Audio {
        sample_rate: 16_000,
        samples: (0..32_000).map(|i| (i as f32 * 0.05).sin() * 0.3).collect(),
    };
    for i in 0..3 {
        write_wav(&train.join(format!("normal_id_00_{i:08}.wav")), &tone).unwrap();
    }
    let good = std::fs::read(train.join("normal_id_00_00000000.wav")).unwrap();
    std::fs::write(train.join("normal_id_00_00000009.wav"), &good[..1000]).unwrap();
    write_wav(&train.join("take 2.wav"), &tone).unwrap();

    let runs = tempfile::tempdir().unwrap();
    let mut harness = harness(runs.path(), 10);
    harness.step();
    // Dropped on the window, as a file manager would.
    harness
        .input_mut()
        .dropped_files
        .push(std::sync::Arc::new(Dropped(dir.path().to_path_buf())));
    harness.step();
    wait_for(
        &mut harness,
        "the file check",
        Duration::from_secs(60),
        |app| app.dataset.checking.is_none() && app.dataset.root.is_some(),
    );
    harness.get_by_label_contains("2 bad file(s)");
    harness.get_by_label_contains("normal_id_00_00000009.wav: truncated");
    harness.get_by_label_contains("take 2.wav: the file name does not follow");
    assert_eq!(harness.state().dataset.counts["valve"][&0].train, 4);
    // The app calibrated on a thread of its own from the start: let that end before the
    // lock is released, or it allocates during the next test's calibration (the pinning
    // test once saw a flat memory line that way).
    wait_for(
        &mut harness,
        "the calibration",
        Duration::from_secs(120),
        |app| app.calibration.is_some(),
    );
}

#[test]
fn each_wgpu_adapter_row_names_its_graphics_api() {
    use headroom_core::BackendKind;
    use headroom_core::probe::{DeviceClass, DeviceReport, MachineReport, MemoryFigure};

    let _alone = measuring_alone();
    let runs = tempfile::tempdir().unwrap();
    let mut harness = harness(runs.path(), 10);
    harness.step();
    // Lavapipe on a machine with Vulkan and GL drivers: one adapter, once per API.
    let llvmpipe = |index: usize, api: &str| DeviceReport {
        backend: BackendKind::Wgpu,
        selector: format!("wgpu:{index}"),
        name: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
        class: DeviceClass::SoftwareAdapter,
        api: api.into(),
        total_memory: MemoryFigure::unknown("no memory size here"),
        free_memory: MemoryFigure::unknown("no free memory here"),
        precisions: vec![headroom_core::precision::Precision::F32],
        max_allocation_bytes: Some(1 << 30),
        usable: api == "Vulkan",
        target: None,
        notes: Vec::new(),
    };
    let app = harness.state_mut();
    let cpu = app
        .machine
        .take()
        .expect("the CPU is probed at once")
        .devices;
    let mut devices = vec![llvmpipe(0, "Vulkan"), llvmpipe(1, "GL")];
    devices.extend(cpu);
    app.machine = Some(MachineReport {
        devices,
        findings: Vec::new(),
        elapsed_ms: 0,
    });
    // flex stays the selected device, two rows further down.
    app.selected = app.selected.map(|i| i + 2);
    harness.step();
    harness.get_by_label("wgpu/Vulkan llvmpipe (LLVM 15.0.6, 256 bits)");
    harness.get_by_label("wgpu/GL llvmpipe (LLVM 15.0.6, 256 bits)");
    // As in the bad-files test: the calibration started at launch ends before the lock goes.
    wait_for(
        &mut harness,
        "the calibration",
        Duration::from_secs(120),
        |app| app.calibration.is_some(),
    );
}

/// A folder dropped on the window.
#[derive(Debug)]
struct Dropped(std::path::PathBuf);

impl eframe::egui::DroppedFile for Dropped {
    fn path(&self) -> &Path {
        &self.0
    }

    fn bytes(&self) -> Result<Vec<u8>, String> {
        Err("a folder has no bytes".into())
    }
}

#[test]
fn without_a_display_it_points_to_trainer_cli() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_trainer-gui"))
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("needs a display"), "{said}");
    assert!(said.contains("trainer-cli train --backend auto"), "{said}");
}

/// Steps the UI until the run's step count has not moved for `quiet`, and returns it.
fn settled_step(harness: &mut Harness<'static, HeadroomApp>, quiet: Duration) -> u64 {
    let started = Instant::now();
    let (mut last, mut since) = (harness.state().session.step(), Instant::now());
    while since.elapsed() < quiet {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the run never settled"
        );
        harness.step();
        std::thread::sleep(Duration::from_millis(50));
        let now = harness.state().session.step();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    last
}

#[test]
fn pause_holds_the_run_and_closing_during_training_asks_to_stop_with_a_checkpoint() {
    let _alone = measuring_alone();
    let runs = tempfile::tempdir().unwrap();
    let mut harness = harness(runs.path(), 500);
    wait_for(
        &mut harness,
        "the calibration",
        Duration::from_secs(120),
        |app| app.plan().is_some_and(|p| p.is_ok()),
    );
    harness.get_by_label("Start").click();
    wait_for(&mut harness, "two steps", Duration::from_secs(300), |app| {
        app.session.step() >= 2
    });

    harness.get_by_label("Pause").click();
    harness.step();
    // A step in flight when Pause was clicked may still end; after that, nothing moves.
    let paused_at = settled_step(&mut harness, Duration::from_secs(2));
    std::thread::sleep(Duration::from_secs(2));
    harness.step();
    assert_eq!(
        harness.state().session.step(),
        paused_at,
        "a paused run trained on"
    );
    harness.get_by_label("Resume").click();
    wait_for(
        &mut harness,
        "a step after resuming",
        Duration::from_secs(120),
        |app| app.session.step() > paused_at,
    );

    // The window's close button, while training.
    harness
        .input_mut()
        .viewports
        .entry(eframe::egui::ViewportId::ROOT)
        .or_default()
        .events
        .push(eframe::egui::ViewportEvent::Close);
    harness.step();
    harness.step();
    harness.get_by_label_contains("Stop training and write a checkpoint");
    harness.get_by_label("Stop and close").click();
    wait_for(&mut harness, "the stop", Duration::from_secs(300), |app| {
        app.session.state == RunState::Finished && app.session.evaluation.is_some()
    });
    let checkpoint = harness.state().session.checkpoints.last().cloned();
    let checkpoint = checkpoint.expect("stopping wrote a checkpoint");
    assert!(Path::new(&checkpoint).join("model.safetensors").is_file());
}

/// The recogniser on the user's recordings: a manifest opened in the dataset panel (here
/// through `Settings::speech_train`, what `trainer-gui --speech-train` sets) is what the run
/// reads, planned by length, and its results are CER and WER.
#[test]
fn the_recogniser_trains_on_recordings_opened_in_the_app() {
    use headroom_datasets::audio::write_wav;
    use headroom_datasets::speech::synthetic::{SpeechConfig, SpeechSplit};
    use std::fmt::Write as _;

    let _alone = measuring_alone();
    let dir = tempfile::tempdir().unwrap();
    let corpus = SpeechConfig {
        train: 10,
        validation: 0,
        test: 0,
        median_words: 2.0,
        ..SpeechConfig::default()
    };
    let mut manifest = String::from("audio\ttranscript\n");
    for key in corpus
        .keys()
        .into_iter()
        .filter(|k| k.split == SpeechSplit::Train)
    {
        let name = format!("{}.wav", key.index);
        write_wav(&dir.path().join(&name), &corpus.audio(&key)).unwrap();
        writeln!(manifest, "{name}\t{}", key.transcript).unwrap();
    }
    let train = dir.path().join("train.tsv");
    std::fs::write(&train, manifest).unwrap();

    let settings = Settings {
        probe_gpus: false,
        runs_dir: dir.path().join("runs"),
        steps: 2,
        speech_train: Some(train.clone()),
        ..Settings::default()
    };
    let app = HeadroomApp::new(&eframe::egui::Context::default(), settings);
    let mut harness = Harness::builder()
        .with_size([1280.0, 900.0])
        .build_ui_state(|ui, app: &mut HeadroomApp| app.ui(ui), app);
    // Another model picked with recordings open trains on its own data.
    assert_eq!(harness.state().speech_files(), None);
    harness.state_mut().model = "asr-transformer".into();
    harness.step();
    assert_eq!(harness.state().speech_files().unwrap().train, train);
    harness.get_by_label_contains("Speech recordings:");
    harness.get_by_label("Generated corpus");

    harness.state_mut().start();
    wait_for(
        &mut harness,
        "the run on the recordings and its scoring",
        Duration::from_secs(300),
        // The results come after the run's `finished` event (scoring follows training).
        |app| app.session.state == RunState::Finished && app.session.results.is_some(),
    );
    let session = &harness.state().session;
    assert_eq!(session.error, None);
    let dataset = session.dataset.as_ref().expect("the run's dataset event");
    assert!(dataset.source.contains("train.tsv"), "{}", dataset.source);
    // Ten listed: every 10th held out for validation.
    assert_eq!((dataset.train_clips, dataset.validation_clips), (9, 1));
    assert!(
        session.padding.is_some(),
        "steps planned by length report padding"
    );
    let results = session.results.as_ref().expect("the run's results");
    assert_eq!(
        results.measures,
        ["CER", "WER", "attention CER", "attention WER"]
    );
}
