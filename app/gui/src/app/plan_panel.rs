//! The plan panel: the budget, the effective batch, a pin per setting, and the plan they give.

use super::*;

impl HeadroomApp {
    pub(super) fn plan_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("Plan");
        let running = self.session.is_running();
        ui.add_enabled_ui(!running, |ui| {
            ui.horizontal(|ui| {
                ui.label("Model");
                egui::ComboBox::from_id_salt("model")
                    .selected_text(self.model.as_str())
                    .show_ui(ui, |ui| {
                        for m in headroom_core::registry::built_in() {
                            let picked = ui
                                .selectable_value(&mut self.model, m.name.to_string(), m.name)
                                .on_hover_text(format!(
                                    "{}; {} parameters, input {} mels x {} frames",
                                    m.summary, m.parameters, m.input.mels, m.input.frames
                                ));
                            // Each model comes with its own step (dcase-ae: the baseline's
                            // 512 frame stacks), which the effective batch starts from.
                            if picked.changed() {
                                self.effective_batch = m.default_batch.effective_batch();
                            }
                        }
                    })
                    .response
                    .on_hover_text("The network to train");
                // The plan rests on steps of the chosen model on the chosen device: measure
                // them when that choice is new (a no-op while they are known or under way).
                self.calibrate_selected();
            });
            ui.horizontal(|ui| {
                ui.label("Budget");
                let mut kind = match self.budget_choice {
                    BudgetChoice::FreeMemory => 0,
                    BudgetChoice::Simulated(_) => 1,
                    BudgetChoice::Custom(_) => 2,
                };
                let free_memory = format!("{:.0}% of free memory", DEFAULT_FRACTION * 100.0);
                egui::ComboBox::from_id_salt("budget-kind")
                    .selected_text(
                        [free_memory.as_str(), "a simulated GPU", "my figure"][kind].to_string(),
                    )
                    .show_ui(ui, |ui| {
                        ui.selectable_value(&mut kind, 0, free_memory.as_str());
                        ui.selectable_value(&mut kind, 1, "a simulated GPU");
                        ui.selectable_value(&mut kind, 2, "my figure");
                    })
                    .response
                    .on_hover_text("Where the memory budget comes from");
                self.budget_choice = match (kind, &self.budget_choice) {
                    (0, _) => BudgetChoice::FreeMemory,
                    (1, BudgetChoice::Simulated(i)) => BudgetChoice::Simulated(*i),
                    (1, _) => BudgetChoice::Simulated(0),
                    (_, BudgetChoice::Custom(t)) => BudgetChoice::Custom(t.clone()),
                    _ => BudgetChoice::Custom("2GiB".into()),
                };
                match &mut self.budget_choice {
                    BudgetChoice::Simulated(i) => {
                        egui::ComboBox::from_id_salt("simulated")
                            .selected_text(devices::DEVICES[*i].label)
                            .show_ui(ui, |ui| {
                                for (j, d) in devices::DEVICES.iter().enumerate() {
                                    ui.selectable_value(i, j, d.label);
                                }
                            })
                            .response
                            .on_hover_text("Simulated GPU");
                    }
                    BudgetChoice::Custom(text) => {
                        ui.add(egui::TextEdit::singleline(text).desired_width(80.0))
                            .on_hover_text("Budget, e.g. 2GiB or 512MiB");
                    }
                    BudgetChoice::FreeMemory => {}
                }
            });
            match self.budget() {
                Ok((bytes, source)) => ui.small(format!("{} ({source})", human(bytes))),
                Err(e) => ui.colored_label(Color32::from_rgb(220, 60, 60), e),
            };
            ui.horizontal(|ui| {
                ui.label("Effective batch (patches)");
                ui.add(egui::DragValue::new(&mut self.effective_batch).range(1..=65_536))
                    .on_hover_text("Effective batch (patches)");
            });
            let pins = &mut self.pins;
            egui::Grid::new("pins").show(ui, |ui| {
                pin_row(ui, "Micro-batch", &mut pins.micro_batch, 1..=4096);
                pin_row(ui, "Patches per spectrogram", &mut pins.n_patches, 1..=16);
                pin_row(ui, "Accumulation steps", &mut pins.accumulation, 1..=4096);
                ui.checkbox(&mut pins.precision.pinned, "Pin precision");
                egui::ComboBox::from_id_salt("precision")
                    .selected_text(pins.precision.value.name())
                    .show_ui(ui, |ui| {
                        for p in [Precision::F32, Precision::F16, Precision::Bf16] {
                            ui.selectable_value(&mut pins.precision.value, p, p.name());
                        }
                    })
                    .response
                    .on_hover_text("Precision");
                ui.end_row();
                ui.checkbox(&mut pins.checkpointing.pinned, "Pin checkpointing");
                ui.checkbox(&mut pins.checkpointing.value, "gradient checkpointing");
                ui.end_row();
            });
        });
        let planned = match &self.session.plan {
            // A run's own plan, checked by its dry-run, once it has one.
            Some(report)
                if self.session.is_running() || self.session.state == RunState::Finished =>
            {
                ui.small("The run's plan (checked by its dry-run step):");
                Some(Ok((report.plan.clone(), report.breakdown)))
            }
            _ => self.frame_plan.clone(),
        };
        match planned {
            None => {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label("Calibrating on the device (a few real steps)...");
                });
            }
            Some(Err(e)) => {
                ui.colored_label(Color32::from_rgb(220, 60, 60), e);
            }
            Some(Ok((plan, _))) => {
                egui::Grid::new("plan").striped(true).show(ui, |ui| {
                    let rows = [
                        ("micro-batch", plan.micro_batch.to_string()),
                        ("patches", plan.n_patches.to_string()),
                        ("stride", TrainConfig::default().stride.to_string()),
                        ("accumulation", plan.accumulation.to_string()),
                        ("precision", plan.precision.name().to_string()),
                        (
                            "checkpointing",
                            if plan.checkpointing { "on" } else { "off" }.to_string(),
                        ),
                        (
                            "effective batch",
                            format!("{} patches", plan.effective_batch),
                        ),
                        ("predicted peak", human(plan.predicted_peak_bytes)),
                    ];
                    for (k, v) in rows {
                        ui.label(k);
                        ui.label(RichText::new(v).strong());
                        ui.end_row();
                    }
                });
                ui.small(&plan.reason);
            }
        }
    }
}

fn pin_row(
    ui: &mut egui::Ui,
    label: &str,
    pin: &mut Pin<usize>,
    range: std::ops::RangeInclusive<usize>,
) {
    ui.checkbox(&mut pin.pinned, format!("Pin {}", label.to_lowercase()));
    ui.add_enabled(
        pin.pinned,
        egui::DragValue::new(&mut pin.value).range(range),
    )
    .on_hover_text(label);
    ui.end_row();
}
