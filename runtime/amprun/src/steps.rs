//! Accuracy per update step of a rolled-out network (docs/rollouts.md, "Accuracy per
//! update step").
//!
//! The frames run one after another, each taking F(R) update steps (the inference factor)
//! once the previous one is known; within a frame, the output is known T(1, y) steps after
//! the frame started (the tableau of the window of size 1, frame 1: frame 0 of the tableau
//! is the zeros before the first data frame). So data frame k (0-based, the frame counter
//! of the graph) answers at update step `k · F(R) + T(1, y)`: one answer per step from step
//! 1 under the streaming rollout, one per F(R) steps under the sequential one. At update
//! step U an instance's answer is that of its latest frame answered by then; before its
//! first frame's output, it has none. The compiler records the frame counter, F(R) and
//! T(1, y) in the graph's metadata.

use amp_exec::Judgement;
use amp_ir::Graph;
use amp_lower::network::{ROLLOUT_FACTOR_META, ROLLOUT_FRAME_FIELD_META, ROLLOUT_OUTPUT_STEP_META};

/// When each frame's output exists, in update steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepTiming {
    /// The index of the frame counter among the state fields.
    frame_field: usize,
    /// F(R).
    pub factor: usize,
    /// T(1, y): the step of the first frame's output.
    pub first: usize,
}

/// The accuracy at one update step: `None` before any instance has an output.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepAccuracy {
    pub step: usize,
    pub accuracy: Option<f32>,
    /// Whether a frame's output appears at this step.
    pub answers: bool,
}

impl StepTiming {
    /// The timing of `graph` when it is a rolled-out network whose metadata has it.
    pub fn of(graph: &Graph) -> Option<StepTiming> {
        let number = |key: &str| graph.meta.get(key).and_then(|v| v.parse::<usize>().ok());
        let frame_field = graph.field_named(graph.meta.get(ROLLOUT_FRAME_FIELD_META)?)?;
        let (factor, first) = (number(ROLLOUT_FACTOR_META)?, number(ROLLOUT_OUTPUT_STEP_META)?);
        (factor >= 1 && first >= 1).then_some(StepTiming { frame_field: usize::from(frame_field.0), factor, first })
    }

    /// The update step at which data frame `k`'s output exists.
    pub fn step_of_frame(&self, k: usize) -> usize {
        k.saturating_mul(self.factor).saturating_add(self.first)
    }

    /// Accuracy at every update step from 1 to the step of the last frame's output, from
    /// each instance's judged frames (`judgements[i]`: the loss reports of instance i).
    pub fn accuracy_per_step(&self, judgements: &[Vec<Judgement>]) -> Vec<StepAccuracy> {
        // Per instance, frame k's verdict at index k (None: not judged).
        let verdicts: Vec<Vec<Option<bool>>> = judgements
            .iter()
            .map(|reports| {
                let mut frames: Vec<Option<bool>> = Vec::new();
                for report in reports {
                    let Some(k) = report.state.get(self.frame_field).and_then(|&k| usize::try_from(k).ok()) else {
                        continue;
                    };
                    if frames.len() <= k {
                        frames.resize(k + 1, None);
                    }
                    frames[k] = Some(report.correct);
                }
                frames
            })
            .collect();
        let frames = verdicts.iter().map(Vec::len).max().unwrap_or(0);
        if frames == 0 {
            return Vec::new();
        }
        let last = self.step_of_frame(frames - 1);
        (1..=last)
            .map(|step| {
                // The latest frame answered by `step`, if any.
                let answered = (step >= self.first).then(|| (step - self.first) / self.factor);
                let mut correct = 0usize;
                let mut judged = 0usize;
                if let Some(latest) = answered {
                    for frames in &verdicts {
                        let upto = &frames[..frames.len().min(latest + 1)];
                        if let Some(verdict) = upto.iter().rev().flatten().next() {
                            judged += 1;
                            correct += usize::from(*verdict);
                        }
                    }
                }
                let accuracy = (judged > 0).then(|| correct as f32 / judged as f32);
                let answers = step >= self.first && (step - self.first).is_multiple_of(self.factor);
                StepAccuracy { step, accuracy, answers }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(factor: usize, first: usize) -> StepTiming {
        StepTiming { frame_field: 1, factor, first }
    }

    /// Instance `i`'s reports: frame k judged `verdicts[k]`, arriving in reverse order.
    fn reports(i: i64, verdicts: &[bool]) -> Vec<Judgement> {
        let mut list: Vec<Judgement> = verdicts
            .iter()
            .enumerate()
            .map(|(k, &correct)| Judgement { state: vec![i, k as i64].into_boxed_slice(), correct })
            .collect();
        list.reverse();
        list
    }

    #[test]
    fn streaming_answers_every_step() {
        let judged = vec![reports(0, &[false, true, true]), reports(1, &[false, false, true])];
        let steps = timing(1, 1).accuracy_per_step(&judged);
        let accuracy: Vec<Option<f32>> = steps.iter().map(|s| s.accuracy).collect();
        assert_eq!(accuracy, vec![Some(0.0), Some(0.5), Some(1.0)]);
        assert!(steps.iter().all(|s| s.answers));
    }

    #[test]
    fn sequential_answers_every_f_steps() {
        let judged = vec![reports(0, &[true, false]), reports(1, &[false, false])];
        let steps = timing(4, 4).accuracy_per_step(&judged);
        let accuracy: Vec<Option<f32>> = steps.iter().map(|s| s.accuracy).collect();
        let none = None;
        assert_eq!(accuracy, vec![none, none, none, Some(0.5), Some(0.5), Some(0.5), Some(0.5), Some(0.0)]);
        let answering: Vec<usize> = steps.iter().filter(|s| s.answers).map(|s| s.step).collect();
        assert_eq!(answering, vec![4, 8]);
        // A hybrid whose output is known before the frame ends: 3k + 2.
        assert_eq!(timing(3, 2).step_of_frame(0), 2);
        assert_eq!(timing(3, 2).step_of_frame(2), 8);
    }

    #[test]
    fn an_instance_with_fewer_frames_keeps_its_last_answer() {
        let judged = vec![reports(0, &[true]), reports(1, &[false, true])];
        let steps = timing(1, 1).accuracy_per_step(&judged);
        let accuracy: Vec<Option<f32>> = steps.iter().map(|s| s.accuracy).collect();
        assert_eq!(accuracy, vec![Some(0.5), Some(1.0)]);
        assert!(timing(1, 1).accuracy_per_step(&[]).is_empty());
    }
}
