//! The window drawn natively, frame by frame, fed the worker's JSON lines and clicked where
//! its buttons are painted: what the page would show, without a browser.

use super::*;

/// One frame of the page at 1000 x 900 points, with `input`'s events; the texts it
/// painted and what the user asked for.
fn frame(
    page: &mut PageUi,
    ctx: &egui::Context,
    events: Vec<egui::Event>,
) -> (Vec<Painted>, Vec<Action>) {
    let input = egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(
            egui::Pos2::ZERO,
            egui::vec2(1000.0, 900.0),
        )),
        events,
        ..Default::default()
    };
    let mut painted = Vec::new();
    let mut actions = Vec::new();
    let _ = ctx.run_ui(input, |ui| {
        actions = page.show(ui);
        painted = painted_texts(ui.ctx());
    });
    (painted, actions)
}

fn texts(painted: &[Painted]) -> String {
    painted
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn run_lines() -> Vec<String> {
    let step = |step: u64, loss: f64| {
        format!(
            r#"{{"event":"step","step":{step},"total_steps":3,"epoch":0,"loss":{loss},"reconstruction_loss":{loss},"lr":0.001,"grad_norm":1.0,"patches_per_s":120.0,"step_ms":50.0,"micro_batch":2,"accumulation":1,"mem_allocated_bytes":41943040,"mem_peak_bytes":104857600,"mem_budget_bytes":536870912}}"#
        )
    };
    vec![
        r#"{"event":"backend_choice","backend":"flex","reason":"no WebGPU adapter in this browser"}"#.into(),
        r#"{"event":"budget","bytes":536870912,"source":"given as 512 MiB"}"#.into(),
        r#"{"event":"config","model":"vq-autoencoder","backend":"flex","device":"cpu","micro_batch":2,"accumulation":1,"n_patches":4,"stride":4,"effective_batch":8,"total_steps":3,"start_step":0,"steps_per_epoch":3,"lr":0.001,"seed":5,"train_clips":6,"validation_clips":2,"test_clips":4,"parameters":1000,"memory_source":"host_allocator","precision":"f32","checkpointing":false}"#.into(),
        step(1, 0.9),
        step(2, 0.7),
    ]
}

#[test]
fn the_runs_events_are_drawn() {
    let ctx = egui::Context::default();
    let mut page = PageUi::new("?start=1");
    page.starting();
    for line in run_lines() {
        page.event_line(&line).unwrap();
    }
    // The first frame lays out; what it draws is the second's.
    frame(&mut page, &ctx, vec![]);
    let (painted, _) = frame(&mut page, &ctx, vec![]);
    let shown = texts(&painted);
    assert!(shown.contains("Backend flex: no WebGPU adapter"), "{shown}");
    assert!(
        shown.contains("Memory (the page's heap, counted): in use"),
        "{shown}"
    );
    assert!(
        shown.contains("in use 40 MiB, step peak 100 MiB, budget 512 MiB"),
        "{shown}"
    );
    assert!(shown.contains("loss 0.7000"), "{shown}");
    assert!(shown.contains("Files of the run:\nnone yet"), "{shown}");
}

#[test]
fn the_budget_typed_replaces_the_addresss() {
    let mut page = PageUi::new("?steps=4&budget=1GiB&backend=cpu");
    assert_eq!(page.budget, "1GiB");
    assert_eq!(
        page.start_query().unwrap(),
        "steps=4&backend=cpu&budget=1GiB"
    );
    page.budget = " 300MiB ".into();
    assert_eq!(
        page.start_query().unwrap(),
        "steps=4&backend=cpu&budget=300MiB"
    );
    page.budget.clear();
    assert_eq!(page.start_query().unwrap(), "steps=4&backend=cpu");
    page.budget = "lots".into();
    let error = page.start_query().unwrap_err();
    assert!(
        error.contains("budget") && error.contains("lots"),
        "{error}"
    );
}

#[test]
fn losses_csv_has_a_row_per_step_shown() {
    let mut page = PageUi::new("");
    assert_eq!(page.losses_csv(), None);
    page.starting();
    for line in run_lines() {
        page.event_line(&line).unwrap();
    }
    assert_eq!(
        page.losses_csv().unwrap(),
        "step,loss,patches_per_s,mem_allocated_bytes,mem_peak_bytes\n\
         1,0.9,120,41943040,104857600\n\
         2,0.7,120,41943040,104857600\n"
    );
}

#[test]
fn a_bad_line_names_itself() {
    let mut page = PageUi::new("");
    let error = page.event_line("{\"event\":\"nonsense\"}").unwrap_err();
    assert!(error.contains("nonsense"), "{error}");
}

#[test]
fn buttons_are_clicked_where_they_are_painted() {
    let ctx = egui::Context::default();
    let mut page = PageUi::new("");
    frame(&mut page, &ctx, vec![]);
    assert_eq!(
        click(&mut page, &ctx, "Start"),
        vec![Action::Start(String::new())]
    );
}

/// A click at the middle of the painted `label`; what the user asked for.
fn click(page: &mut PageUi, ctx: &egui::Context, label: &str) -> Vec<Action> {
    let (painted, _) = frame(page, ctx, vec![]);
    let Some(button) = painted.iter().find(|p| p.text == label) else {
        panic!("no {label} in {}", texts(&painted));
    };
    let at = egui::pos2(button.x + button.w / 2.0, button.y + button.h / 2.0);
    let press = |pressed| egui::Event::PointerButton {
        pos: at,
        button: egui::PointerButton::Primary,
        pressed,
        modifiers: Default::default(),
    };
    frame(page, ctx, vec![egui::Event::PointerMoved(at)]);
    frame(page, ctx, vec![press(true), press(false)]).1
}

#[test]
fn a_chosen_checkpoint_is_said_until_a_new_run_is_asked_for() {
    let ctx = egui::Context::default();
    let mut page = PageUi::new("");
    frame(&mut page, &ctx, vec![]);
    assert_eq!(
        click(&mut page, &ctx, "Resume from a checkpoint..."),
        vec![Action::PickCheckpoint]
    );
    page.set_checkpoint("model.safetensors, optimizer.burnpack, state.json (step 2)");
    // A run keeps it: Start again resumes from it again.
    page.starting();
    page.ended();
    let (painted, _) = frame(&mut page, &ctx, vec![]);
    let shown = texts(&painted);
    assert!(
        shown.contains("Resume from: model.safetensors, optimizer.burnpack, state.json (step 2)."),
        "{shown}"
    );
    assert_eq!(
        click(&mut page, &ctx, "New run instead"),
        vec![Action::ForgetCheckpoint]
    );
    page.set_checkpoint("");
    let (painted, _) = frame(&mut page, &ctx, vec![]);
    let shown = texts(&painted);
    assert!(
        shown.contains("Start: a new run.") && !shown.contains("New run instead"),
        "{shown}"
    );
}

#[test]
fn a_finished_run_says_it_scores_unless_the_address_says_eval_0() {
    let finished =
        r#"{"event":"finished","step":3,"total_steps":3,"stopped_early":false,"elapsed_s":2.0}"#;
    for (query, status) in [
        (
            "?steps=3",
            "finished at step 3/3 in 2.0 s; scoring the test split",
        ),
        ("?steps=3&eval=0", "finished at step 3/3 in 2.0 s"),
    ] {
        let mut page = PageUi::new(query);
        page.starting();
        page.event_line(finished).unwrap();
        assert_eq!(page.status(), status, "{query}");
        page.ended();
        assert_eq!(page.status(), "finished at step 3/3 in 2.0 s", "{query}");
    }
}

#[test]
fn a_pause_while_the_run_prepares_outlasts_its_config() {
    let mut page = PageUi::new("");
    page.starting();
    page.session.state = RunState::Paused;
    for line in run_lines() {
        page.event_line(&line).unwrap();
    }
    assert_eq!(page.session.state, RunState::Paused);
    assert!(
        page.status().starts_with("paused after step 2/3"),
        "{}",
        page.status()
    );
}

#[test]
fn pause_stop_and_the_end_show_in_the_status() {
    let mut page = PageUi::new("");
    page.starting();
    for line in run_lines() {
        page.event_line(&line).unwrap();
    }
    page.session.state = RunState::Paused;
    assert!(
        page.status().starts_with("paused after step 2/3"),
        "{}",
        page.status()
    );
    page.session.state = RunState::Stopping;
    assert_eq!(page.status(), "stopping (after the step under way)");
    page.event_line(
        r#"{"event":"finished","step":2,"total_steps":3,"stopped_early":true,"elapsed_s":1.5}"#,
    )
    .unwrap();
    page.ended();
    assert_eq!(page.status(), "stopped at step 2/3 in 1.5 s");
    page.fail("out of patience");
    assert_eq!(page.status(), "stopped by an error");
}
