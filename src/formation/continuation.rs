//! The continuation message: the one user message a waiting task continues with,
//! holding every member answer (and, later, every delegation outcome, after the
//! answers), then the runtime's own lines (spec, call-member, "How the answer arrives").

use super::{CallStatus, EndedCall};
use crate::tools::fence;

/// Member output is cut at this many bytes (64 KiB), on a UTF-8 character boundary.
pub const OUTPUT_CAP: usize = 64 * 1024;

/// Cuts `s` to at most `cap` bytes without splitting a character.
pub fn cut_utf8(s: &str, cap: usize) -> &str {
    if s.len() <= cap {
        return s;
    }
    let mut end = cap;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// What a task knows about one member it called: its latest call in this task.
#[derive(Debug, Clone, PartialEq)]
pub struct Latest {
    /// The member.
    pub member: String,
    /// The latest call's id.
    pub call_id: String,
    /// How it ended.
    pub status: CallStatus,
    /// Members further down that gave the member no answer, `(name, status)`, as read
    /// from its `metadata.murmur.noAnswerBelow` (completed and no_answer calls only).
    pub below: Vec<(String, String)>,
}

/// Per member, its latest ended call in this task, in the order members were first
/// called. A member has no answer when its latest call did not end completed, wherever
/// that call ended (its own tool call or a continuation).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ledger {
    /// One entry per member called in this task.
    pub latest: Vec<Latest>,
}

impl Ledger {
    /// Records that a call ended; replaces the member's earlier entry.
    pub fn ended(&mut self, c: &EndedCall) {
        let l = Latest {
            member: c.member.clone(),
            call_id: c.call_id.clone(),
            status: c.status,
            below: c.below.clone(),
        };
        match self.latest.iter_mut().find(|x| x.member == c.member) {
            Some(x) => *x = l,
            None => self.latest.push(l),
        }
    }

    /// The members with no answer: latest call not completed.
    pub fn no_answer(&self) -> impl Iterator<Item = &Latest> {
        self.latest
            .iter()
            .filter(|l| l.status != CallStatus::Completed)
    }

    /// The members that answered with a gap: completed, with members further down
    /// that gave no answer.
    pub fn gaps(&self) -> impl Iterator<Item = &Latest> {
        self.latest
            .iter()
            .filter(|l| l.status == CallStatus::Completed && !l.below.is_empty())
    }

    /// `noAnswerBelow` for this task's own GetTask result: every member it had no
    /// answer from, with status, then the members further down they or gap-answerers
    /// named; distinct, at most 8.
    pub fn no_answer_below(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut push = |n: &str, s: &str| {
            if out.len() < 8 && !out.iter().any(|(m, _)| m == n) {
                out.push((n.to_string(), s.to_string()));
            }
        };
        for l in self.no_answer() {
            push(&l.member, l.status.as_str());
        }
        for l in &self.latest {
            for (n, s) in &l.below {
                push(n, s);
            }
        }
        out
    }
}

fn names(list: &[(String, String)]) -> String {
    list.iter()
        .map(|(n, s)| format!("{n} ({s})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The header line of one answer.
pub fn header(c: &EndedCall) -> String {
    if c.status == CallStatus::Completed {
        format!(
            "[call-member] call {} to {} ended completed:",
            c.call_id, c.member
        )
    } else {
        format!(
            "[call-member] call {} to {} ended {}, with no answer from {}:",
            c.call_id,
            c.member,
            c.status.as_str(),
            c.member
        )
    }
}

/// Builds the continuation message.
///
/// - `answers`: the calls being delivered now, in the order they were made; each is a
///   header line and its output (cut at [`OUTPUT_CAP`]) fenced under `member:<name>`.
/// - `outcomes`: further blocks that join the same message after the answers (the
///   delegation outcomes of `delegate-task`, rendered by their own code).
/// - `ledger`: every member's latest call in this task, `answers` included; decides
///   the no-answer line, the gap lines and the last line.
/// - `caller`: the formation member that sent the calling task, if one did; the last
///   line then names end-without-answer.
///
/// Blocks are separated by one empty line; the message has no trailing newline.
pub fn build(
    answers: &[EndedCall],
    outcomes: &[String],
    ledger: &Ledger,
    caller: Option<&str>,
) -> String {
    let mut blocks: Vec<String> = Vec::new();
    for a in answers {
        let src = format!("member:{}", a.member);
        blocks.push(format!(
            "{}\n{}",
            header(a),
            fence(&src, cut_utf8(&a.output, OUTPUT_CAP), &[])
        ));
    }
    blocks.extend(outcomes.iter().cloned());
    let missing: Vec<String> = ledger
        .no_answer()
        .map(|l| {
            if l.below.is_empty() {
                format!("{} (call {}, {})", l.member, l.call_id, l.status.as_str())
            } else {
                format!(
                    "{} (call {}, {}; further down, no answer came from {})",
                    l.member,
                    l.call_id,
                    l.status.as_str(),
                    names(&l.below)
                )
            }
        })
        .collect();
    if !missing.is_empty() {
        blocks.push(format!("[call-member] No answer came from: {}. What you asked of them has not been done by them: do not present an answer of your own as theirs.", missing.join(", ")));
    }
    let mut gaps = 0;
    for g in ledger.gaps() {
        gaps += 1;
        blocks.push(format!("[call-member] {} (call {}) answered without an answer from {}: any part of its answer that stands in for theirs is {}'s own, not theirs.", g.member, g.call_id, names(&g.below), g.member));
    }
    if missing.is_empty() && gaps == 0 {
        blocks.push("[call-member] Every call this task made has ended, and the answers are above. Answer the task with them now; call a member again only to give it new work.".into());
    } else {
        let mut last = String::from("[call-member] Every call this task made has ended. Answer the task with the answers you have and say plainly which part has no answer, or call a member again if another attempt could succeed.");
        if let Some(c) = caller {
            last.push_str(&format!(" If you have no answer to give, call end-without-answer with the reason instead: the runtime then tells {c} plainly that you gave none."));
        }
        blocks.push(last);
    }
    blocks.join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, m: &str, s: CallStatus, out: &str) -> EndedCall {
        EndedCall {
            call_id: id.into(),
            member: m.into(),
            status: s,
            output: out.into(),
            below: vec![],
            member_task: None,
            door: None,
            detail: None,
            never_held: false,
        }
    }

    #[test]
    fn the_spec_example_byte_for_byte() {
        let a = [
            call("mcl_01a1…", "worker", CallStatus::Completed, "WORKER-0123"),
            call(
                "mcl_01a2…",
                "critic",
                CallStatus::TimedOut,
                "critic did not answer within 600s. …",
            ),
        ];
        let mut l = Ledger::default();
        a.iter().for_each(|c| l.ended(c));
        let want = "[call-member] call mcl_01a1… to worker ended completed:
<untrusted-content source=member:worker>
WORKER-0123
</untrusted-content>

[call-member] call mcl_01a2… to critic ended timed_out, with no answer from critic:
<untrusted-content source=member:critic>
critic did not answer within 600s. …
</untrusted-content>

[call-member] No answer came from: critic (call mcl_01a2…, timed_out). What you asked of them has not been done by them: do not present an answer of your own as theirs.

[call-member] Every call this task made has ended. Answer the task with the answers you have and say plainly which part has no answer, or call a member again if another attempt could succeed.";
        assert_eq!(build(&a, &[], &l, None), want);
    }

    #[test]
    fn all_answered_gets_the_none_line_and_never_names_the_tool() {
        let a = [call("mcl_1", "worker", CallStatus::Completed, "ok")];
        let mut l = Ledger::default();
        l.ended(&a[0]);
        let m = build(&a, &[], &l, Some("lead"));
        assert!(m.ends_with("\n\n[call-member] Every call this task made has ended, and the answers are above. Answer the task with them now; call a member again only to give it new work."), "{m}");
    }

    #[test]
    fn further_down_gap_and_caller_lines() {
        let mut w = call("mcl_w", "worker", CallStatus::Completed, "partial");
        w.below = vec![
            ("critic".into(), "no_answer".into()),
            ("scout".into(), "timed_out".into()),
        ];
        let mut h = call(
            "mcl_h",
            "helper",
            CallStatus::NoAnswer,
            "helper ended its task without an answer",
        );
        h.below = vec![("scout".into(), "failed".into())];
        let mut l = Ledger::default();
        l.ended(&w);
        l.ended(&h);
        let m = build(&[w, h], &["DELEGATION BLOCK".to_string()], &l, Some("boss"));
        let tail = "DELEGATION BLOCK

[call-member] No answer came from: helper (call mcl_h, no_answer; further down, no answer came from scout (failed)). What you asked of them has not been done by them: do not present an answer of your own as theirs.

[call-member] worker (call mcl_w) answered without an answer from critic (no_answer), scout (timed_out): any part of its answer that stands in for theirs is worker's own, not theirs.

[call-member] Every call this task made has ended. Answer the task with the answers you have and say plainly which part has no answer, or call a member again if another attempt could succeed. If you have no answer to give, call end-without-answer with the reason instead: the runtime then tells boss plainly that you gave none.";
        assert!(m.ends_with(tail), "{m}");
        assert!(m.starts_with("[call-member] call mcl_w to worker ended completed:\n<untrusted-content source=member:worker>\npartial\n</untrusted-content>\n\n[call-member] call mcl_h to helper ended no_answer, with no answer from helper:\n"));
    }

    #[test]
    fn a_later_completed_call_clears_the_member() {
        let mut l = Ledger::default();
        l.ended(&call("mcl_1", "worker", CallStatus::Failed, "x"));
        l.ended(&call("mcl_2", "worker", CallStatus::Completed, "y"));
        assert_eq!(l.no_answer().count(), 0);
    }

    #[test]
    fn output_is_cut_at_64_kib_on_a_char_boundary() {
        let s = "é".repeat(40_000); // 80 000 bytes
        let c = cut_utf8(&s, OUTPUT_CAP);
        assert_eq!(c.len(), OUTPUT_CAP);
        let s = format!("a{}", "é".repeat(40_000));
        assert_eq!(cut_utf8(&s, OUTPUT_CAP).len(), OUTPUT_CAP - 1);
    }
}
