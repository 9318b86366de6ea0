//! Collects problems and walkthrough lines, step by step (each step's checks add to it).

use super::model::{Problem, Severity, Step, StepReport};
use crate::preflight::{PreflightReport, Status};

#[derive(Default)]
pub(super) struct Builder {
    pub(super) problems: Vec<Problem>,
    pub(super) steps: Vec<StepReport>,
}

impl Builder {
    pub(super) fn problem(
        &mut self,
        severity: Severity,
        step: Step,
        title: String,
        evidence: Vec<String>,
        fix: Option<&str>,
    ) {
        self.problems.push(Problem { severity, step, title, evidence, fix: fix.map(str::to_string) });
    }

    pub(super) fn step(&mut self, step: Step, lines: Vec<String>) {
        match self.steps.iter_mut().find(|s| s.step == step) {
            Some(s) => s.lines.extend(lines),
            None => self.steps.push(StepReport { step, lines }),
        }
    }

    /// A preflight finding as a walkthrough line and, when it is not fine, a problem.
    pub(super) fn add_finding(&mut self, pre: &PreflightReport, id: &str, step: Step) {
        let Some(f) = pre.finding(id) else { return };
        self.step(step, vec![format!("{id}: {} — {}", f.status, f.summary)]);
        let sev = match f.status {
            Status::Fail => Severity::High,
            Status::Warn => Severity::Medium,
            Status::Unknown => Severity::Info,
            _ => return,
        };
        let evidence = f.evidence.iter().take(4).map(|e| format!("{} = {}", e.path, e.value)).collect();
        self.problem(sev, step, format!("{id}: {}", f.summary), evidence, f.hint.as_deref());
    }
}
