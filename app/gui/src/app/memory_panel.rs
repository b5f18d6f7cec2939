//! The memory panel: the device's bar with the budget line, the step against its plan, host RAM.

use super::*;

impl HeadroomApp {
    pub(super) fn memory_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("Memory");
        let budget = self.budget().ok().map(|(b, _)| b);
        let capacity = self
            .device()
            .and_then(|d| d.total_memory.bytes)
            .or(budget)
            .unwrap_or(1);
        let running = self.session.latest_memory().copied();
        let segments: Vec<Segment> = match (running, self.frame_plan.clone()) {
            (Some(m), _) => {
                let mut s = vec![Segment {
                    label: format!("allocated {}", human(m.allocated)),
                    bytes: m.allocated,
                    color: palette("allocated"),
                }];
                s.push(Segment {
                    label: format!("step peak {}", human(m.peak)),
                    bytes: m.peak.saturating_sub(m.allocated),
                    color: palette("peak"),
                });
                if let Some(r) = m.reserved {
                    s.push(Segment {
                        label: format!("reserved {}", human(r)),
                        bytes: r.saturating_sub(m.peak),
                        color: palette("reserved"),
                    });
                }
                s
            }
            (None, Some(Ok((_, b)))) => breakdown_segments(&b),
            _ => Vec::new(),
        };
        let (title, peak) = match running {
            Some(m) => (
                format!(
                    "Device, measured at step {}: allocated {}, peak {}{}",
                    m.step,
                    human(m.allocated),
                    human(m.peak),
                    m.budget
                        .map(|b| format!(", budget {}", human(b)))
                        .unwrap_or_default()
                ),
                Some(m.peak),
            ),
            None => ("Device, predicted for the plan".to_string(), None),
        };
        ui.label(title);
        let shown_budget = running.and_then(|m| m.budget).or(budget);
        MemoryBar {
            capacity,
            budget: shown_budget,
            segments: &segments,
            peak,
        }
        .show(ui);
        legend(ui, &segments);
        if let Some(b) = shown_budget {
            ui.small(format!(
                "red line: budget {} of {}",
                human(b),
                human(capacity)
            ));
        }
        // The same step at a scale where it can be read: against the plan's prediction.
        let predicted = self
            .session
            .plan
            .as_ref()
            .map(|p| p.plan.predicted_peak_bytes);
        if let (Some(m), Some(predicted)) = (running, predicted) {
            ui.label(format!(
                "This step against the plan: peak {} of {} predicted",
                human(m.peak),
                human(predicted)
            ));
            MemoryBar {
                capacity: (predicted.max(m.peak) as f64 * 1.15) as u64,
                budget: Some(predicted),
                segments: &segments,
                peak: Some(m.peak),
            }
            .show(ui);
            ui.small("red line: the plan's predicted peak");
        }
        let used = self.host.total.saturating_sub(self.host.available);
        ui.label(format!(
            "Host RAM: {} used of {}",
            human(used),
            human(self.host.total)
        ));
        MemoryBar {
            capacity: self.host.total.max(1),
            budget: None,
            segments: &[Segment {
                label: format!("used {}", human(used)),
                bytes: used,
                color: palette("host"),
            }],
            peak: None,
        }
        .show(ui);
    }
}

fn breakdown_segments(b: &Breakdown) -> Vec<Segment> {
    [
        ("parameters", b.parameters),
        ("gradients", b.gradients),
        ("optimizer", b.optimizer),
        ("activations", b.activations),
        ("data", b.data),
        ("overhead", b.overhead),
    ]
    .into_iter()
    .map(|(label, bytes)| Segment {
        label: label.into(),
        bytes,
        color: palette(label),
    })
    .collect()
}
