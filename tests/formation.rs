//! Formations end to end with the real binary: `mur run --roster`, call-member,
//! end-without-answer, busy re-offers, peers that misbehave, `mur door`.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{bounded, Sender};
use serde_json::{json, Value};
use support::{sdk, Formation};

use std::sync::atomic::Ordering;

use mur::a2a::types::{AgentCard, Artifact, Message, Task, TaskState, TaskStatus};
use mur::door::{CancelError, Door, DoorLimits, TaskHandler};

const STARTED_NOTE: &str = "Its answer is not in this result and no tool fetches it: the runtime adds it to this conversation after you end your turn. Unless you still have work to hand to a different member, end your turn now by replying without calling a tool.";

fn started_text(call_id: &str, member: &str, task_id: &str) -> String {
    format!("<untrusted-content source=tool:call-member>\n{{\"call_id\":\"{call_id}\",\"member\":\"{member}\",\"status\":\"started\",\"task_id\":\"{task_id}\"}}\n</untrusted-content>\n[call-member] {member} is now working on call {call_id}. {STARTED_NOTE} Calling {member} again before its answer arrives is refused.")
}

fn refused_text(tool: &str, msg: &str) -> String {
    format!("<untrusted-content source=tool:{tool}>\n{msg}\n</untrusted-content>")
}

/// The `call_id` of each call-member tool call, in order.
fn call_ids(run: &support::Run) -> Vec<String> {
    run.records("tool_call")
        .iter()
        .filter(|r| r["name"] == "call-member" && r["member_call_id"].is_string())
        .map(|r| r["member_call_id"].as_str().unwrap().to_string())
        .collect()
}

fn ms(ts: &Value) -> SystemTime {
    humantime::parse_rfc3339(ts.as_str().unwrap()).unwrap()
}

#[test]
fn example_formation_lead_calls_worker_and_critic_and_answers_offline() {
    let f = Formation::new();
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/formation/roster.yaml"
    );
    let run = f.run_roster(std::path::Path::new(example), "Review the notes", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.stdout(), "Review: worker counted the notes (3 lines in notes.txt); critic says three lines are enough for a patch release.\n");
    let lead = run.member("lead");
    assert_eq!(
        lead.one("session_start")["tools_declared"],
        json!(["call-member", "end-without-answer", "session-status"])
    );
    assert_eq!(
        run.member("worker").one("session_start")["tools_declared"],
        json!(["wc", "session-status"])
    );
    let ids = call_ids(&lead);
    let starts = lead.records("member_call_start");
    assert_eq!(starts.len(), 2, "{}", run.dump());
    let texts = lead.tool_texts();
    assert_eq!(
        texts[0],
        started_text(
            &ids[0],
            "worker",
            starts[0]["member_task"].as_str().unwrap()
        )
    );
    assert_eq!(
        texts[1],
        started_text(
            &ids[1],
            "critic",
            starts[1]["member_task"].as_str().unwrap()
        )
    );
    let calls = lead.records("member_call");
    assert_eq!(calls.len(), 2);
    for c in &calls {
        assert_eq!(c["status"], "completed");
        assert_eq!(c["delivered"], true);
    }
    let cont = lead.one("task_continued");
    assert_eq!(cont["answers"], 2);
    assert_eq!(
        cont["text"],
        format!("[call-member] call {} to worker ended completed:\n<untrusted-content source=member:worker>\nnotes.txt has 3 lines.\n</untrusted-content>\n\n[call-member] call {} to critic ended completed:\n<untrusted-content source=member:critic>\nThree lines are enough for a patch release.\n</untrusted-content>\n\n[call-member] Every call this task made has ended, and the answers are above. Answer the task with them now; call a member again only to give it new work.", ids[0], ids[1])
    );
    // the worker's task came from lead, over its door
    let ws = run.member("worker").one("task_start");
    assert_eq!(ws["origin"], "peer");
    assert_eq!(ws["caller"], "lead");
    for m in ["lead", "worker", "critic"] {
        assert_eq!(run.member(m).one("session_end")["exit_status"], "completed");
    }
    // mur run removes each member's runtime directory when the formation ends
    let run_dir = f.home.join("run");
    assert!(!run_dir.exists() || std::fs::read_dir(&run_dir).unwrap().next().is_none());
    // the staged call-member manifest: member is an enum of the callees in roster order
    let lead_dir = std::path::Path::new(example).parent().unwrap().join("lead");
    let loaded =
        mur::staging::load_capsule(&lead_dir, &["worker".into(), "critic".into()]).unwrap();
    let staged = mur::staging::stage_member(
        &f.home,
        &loaded.dir,
        &loaded.text,
        &loaded.manifest,
        &["worker".into(), "critic".into()],
    )
    .unwrap();
    let t =
        std::fs::read_to_string(staged.runtime_dir.join("tools/call-member/murmur.yaml")).unwrap();
    let v: Value = serde_yaml_ng::from_str(&t).unwrap();
    assert_eq!(v["version"], "0.0.0");
    assert_eq!(v["runtime"], "tool");
    assert_eq!(v["implementation"], "native");
    assert_eq!(
        v["input_schema"]["properties"]["member"]["enum"],
        json!(["worker", "critic"])
    );
}

fn no_answer_formation() -> Formation {
    Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [helper]}\n  helper: {capsule: helper, calls: [critic]}\n  critic: {capsule: critic}\n")
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n",
            r#"
- tool_calls:
    - {name: end-without-answer, input: {reason: "no"}}
    - {name: call-member, input: {member: nobody, task: "x"}}
    - {name: call-member, input: {member: helper, task: "Get critic's view."}}
- text: "Waiting for helper."
- text: "Helper gave no answer, so the review has none."
"#,
        )
        .member(
            "helper",
            "capabilities:\n  network: {allow: [localhost]}\n",
            r#"
- tool_calls:
    - {name: call-member, input: {member: critic, task: "Judge this."}}
    - {name: end-without-answer, input: {reason: "too early"}}
    - {name: call-member, input: {member: critic, task: "Again."}}
- text: "Waiting for critic."
- tool_calls:
    - {name: end-without-answer, input: {reason: "  "}}
    - {name: end-without-answer, input: {reason: "critic gave me nothing"}}
    - {name: end-without-answer, input: {reason: "again"}}
    - {name: call-member, input: {member: critic, task: "Once more."}}
"#,
        )
        // critic sleeps a second, then its script runs out: its task fails
        .member(
            "critic",
            "capabilities:\n  shell: {allow: [sleep]}\n",
            "- tool_calls:\n    - {name: sleep, input: {args: [\"1\"]}}\n",
        )
}

#[test]
fn end_without_answer_refusals_acceptance_and_the_callers_continuation() {
    let f = no_answer_formation();
    let run = f.run("Review");
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(
        run.stdout(),
        "Helper gave no answer, so the review has none.\n"
    );
    let lead = run.member("lead");
    let helper = run.member("helper");
    let critic = run.member("critic");
    let lt = lead.tool_texts();
    assert_eq!(lt[0], refused_text("end-without-answer", "'end-without-answer' ends only a task another formation member sent; no formation member sent this one. Reply in text, saying plainly which part has no answer."));
    assert_eq!(lt[1], refused_text("call-member", "'call-member' cannot call `nobody`: this member may call only helper; nothing was sent"));
    let h_call = &call_ids(&lead)[0];
    let c_call = &call_ids(&helper)[0];
    let ht = helper.tool_texts();
    assert_eq!(ht[1], refused_text("end-without-answer", &format!("Call {c_call} to critic is still out; its answer arrives after you end your turn. Call end-without-answer only when no call is left to wait for.")));
    assert_eq!(ht[2], refused_text("call-member", &format!("critic has not yet answered call {c_call} from this task, so nothing was sent. Its answer reaches you only after you end your turn: end your turn now by replying without calling a tool. Once that answer has arrived you may call critic again with new work.")));
    assert_eq!(
        ht[3],
        refused_text(
            "end-without-answer",
            "'end-without-answer' needs a reason: say in a sentence why you have no answer."
        )
    );
    assert_eq!(ht[4], "<untrusted-content source=tool:end-without-answer>\n{\"status\":\"ending\",\"caller\":\"lead\"}\n</untrusted-content>\n[end-without-answer] This task ends without an answer once this turn's tool calls finish, and lead is told you gave none.");
    let accepted = &helper.records("tool_call")[4];
    assert_eq!(accepted["status"], "passed");
    assert_eq!(accepted["summary"], "Ending task without an answer");
    assert_eq!(
        ht[5],
        refused_text(
            "end-without-answer",
            "This task is already ending without an answer."
        )
    );
    assert_eq!(
        ht[6],
        refused_text(
            "call-member",
            "'call-member' makes no call from a task that is ending without an answer."
        )
    );
    // helper's continuation: critic failed; helper's task was sent by lead
    let critic_err = critic.one("task_end")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        helper.one("task_continued")["text"],
        format!("[call-member] call {c_call} to critic ended failed, with no answer from critic:\n<untrusted-content source=member:critic>\n{critic_err}\n</untrusted-content>\n\n[call-member] No answer came from: critic (call {c_call}, failed). What you asked of them has not been done by them: do not present an answer of your own as theirs.\n\n[call-member] Every call this task made has ended. Answer the task with the answers you have and say plainly which part has no answer, or call a member again if another attempt could succeed. If you have no answer to give, call end-without-answer with the reason instead: the runtime then tells lead plainly that you gave none.")
    );
    // how helper's task ended
    assert_eq!(helper.result_txt(), "no answer: critic gave me nothing");
    assert_eq!(helper.one("task_end")["exit_status"], "no_answer");
    assert!(helper.records("task_failed").is_empty());
    assert_eq!(helper.one("session_end")["exit_status"], "completed");
    // lead's continuation: no_answer with the further-down form; the entry task's last
    // line never names the tool
    assert_eq!(
        lead.one("task_continued")["text"],
        format!("[call-member] call {h_call} to helper ended no_answer, with no answer from helper:\n<untrusted-content source=member:helper>\ncritic gave me nothing\n</untrusted-content>\n\n[call-member] No answer came from: helper (call {h_call}, no_answer; further down, no answer came from critic (failed)). What you asked of them has not been done by them: do not present an answer of your own as theirs.\n\n[call-member] Every call this task made has ended. Answer the task with the answers you have and say plainly which part has no answer, or call a member again if another attempt could succeed.")
    );
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "no_answer");
    assert_eq!(
        mc["no_answer_below"],
        json!([{"member": "critic", "status": "failed"}])
    );
    assert_eq!(lead.one("session_end")["exit_status"], "completed");
}

#[test]
fn without_localhost_in_network_allow_staging_warns_w_run_008_and_every_call_fails() {
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker]}\n  worker: {capsule: worker}\n")
        .member(
            "lead",
            "",
            "- tool_calls:\n    - {name: call-member, input: {member: worker, task: \"hi\"}}\n- text: \"no worker\"\n",
        )
        .member("worker", "", "- text: \"W\"\n");
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert!(run.stderr().contains("mur: warning: W-RUN-008: member `lead`: capabilities.network.allow does not list localhost, where the door of `worker` is, so every call-member call from `lead` to `worker` fails; add `localhost` to capabilities.network.allow\n"), "{}", run.stderr());
    let lead = run.member("lead");
    let tc = &lead.records("tool_call")[0];
    assert_eq!(tc["status"], "failed");
    assert_eq!(tc["summary"], "Called worker: failed");
    let id = tc["member_call_id"].as_str().unwrap();
    assert!(
        tc["content"].as_str().unwrap().ends_with(&format!("</untrusted-content>\n[call-member] Call {id} to worker ended failed, with no answer from worker. Do not present an answer of your own as worker's.")),
        "{}",
        tc["content"]
    );
    assert_eq!(lead.one("member_call")["status"], "failed");
    assert!(run.member("worker").records("task_start").is_empty());
}

fn busy_formation(helper_extra: &str) -> Formation {
    Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker, helper]}\n  worker: {capsule: worker}\n  helper: {capsule: helper, calls: [worker]}\n")
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n",
            "- tool_calls:\n    - {name: call-member, input: {member: worker, task: \"first\"}}\n    - {name: call-member, input: {member: helper, task: \"ask worker\"}}\n- text: \"waiting\"\n- text: \"LEAD-DONE\"\n",
        )
        .member(
            "helper",
            &format!("capabilities:\n  network: {{allow: [localhost]}}\n{helper_extra}"),
            "- tool_calls:\n    - {name: call-member, input: {member: worker, task: \"second\"}}\n- text: \"waiting\"\n- text: \"H-DONE\"\n",
        )
}

#[test]
fn a_busy_member_is_offered_the_task_again_until_it_takes_it() {
    let f = busy_formation("").member(
        "worker",
        "capabilities:\n  shell: {allow: [sleep]}\n",
        "- tool_calls:\n    - {name: sleep, input: {args: [\"2\"]}}\n- text: \"W-FIRST\"\n- text: \"W-SECOND\"\n",
    );
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.stdout(), "LEAD-DONE\n");
    let helper = run.member("helper");
    let id = &call_ids(&helper)[0];
    let tc = &helper.records("tool_call")[0];
    assert_eq!(tc["summary"], "Called worker: busy");
    assert_eq!(tc["status"], "passed");
    assert_eq!(tc["content"], format!("<untrusted-content source=tool:call-member>\n{{\"call_id\":\"{id}\",\"member\":\"worker\",\"status\":\"busy\",\"output\":\"worker is busy with other work and did not take the task\"}}\n</untrusted-content>\n[call-member] worker is busy with other work and has not taken call {id} yet. The runtime keeps offering it the task for up to 600s and adds worker's answer, or word that it stayed busy, to this conversation after you end your turn. Unless you still have work to hand to a different member, end your turn now by replying without calling a tool. Calling worker again before then is refused."));
    let busy = helper.records("member_call_busy");
    assert_eq!(busy.len(), 2, "{}", run.dump());
    assert_eq!(busy[0]["offer"], 1);
    assert_eq!(busy[1]["offer"], 2);
    let gap = ms(&busy[1]["ts"])
        .duration_since(ms(&busy[0]["ts"]))
        .unwrap();
    // At least the schedule's 1 s (a loaded machine may only add to it).
    assert!(gap >= Duration::from_millis(1000), "{gap:?}");
    let start = helper.one("member_call_start");
    assert_eq!(start["offer"], 3);
    let waited = ms(&start["ts"]).duration_since(ms(&busy[1]["ts"])).unwrap();
    assert!(waited >= Duration::from_millis(2000), "{waited:?}");
    assert!(helper.one("task_continued")["text"]
        .as_str()
        .unwrap()
        .contains("\n<untrusted-content source=member:worker>\nW-SECOND\n</untrusted-content>\n"));
}

#[test]
fn a_member_busy_for_the_whole_deadline_never_holds_the_call_and_a_slow_one_times_out() {
    // helper's own lifecycle.delegation_deadline_secs (2) wins over the environment's
    // MURMUR_DELEGATION_TIMEOUT_SECS (3), which bounds lead's calls
    let f = busy_formation("lifecycle:\n  delegation_deadline_secs: 2\n").member(
        "worker",
        "capabilities:\n  shell: {allow: [sleep]}\n",
        "- tool_calls:\n    - {name: sleep, input: {args: [\"5\"]}}\n- text: \"W-FIRST\"\n",
    );
    let run = f.run_with("go", &[("MURMUR_DELEGATION_TIMEOUT_SECS", "3")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let helper = run.member("helper");
    let mc = helper.one("member_call");
    assert_eq!(mc["status"], "rejected");
    // The output is the sentence alone; "never held" is the record's own field.
    assert_eq!(mc["output"], "worker stayed busy with other work for the whole 2s this call may wait and never took the task; it was offered the task 2 times. Nothing was done on it.");
    assert_eq!(mc["never_held"], true);
    let lead = run.member("lead");
    let ids = call_ids(&lead);
    let text = lead.one("task_continued")["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.starts_with(&format!("[call-member] call {} to worker ended timed_out, with no answer from worker:\n<untrusted-content source=member:worker>\nworker did not answer within 3s. It was not cancelled and may still be working on the task.\n</untrusted-content>\n\n", ids[0])), "{text}");
    // helper completed while worker gave it nothing: an answer with a gap
    assert!(text.ends_with(&format!("[call-member] No answer came from: worker (call {}, timed_out). What you asked of them has not been done by them: do not present an answer of your own as theirs.\n\n[call-member] helper (call {}) answered without an answer from worker (rejected): any part of its answer that stands in for theirs is helper's own, not theirs.\n\n[call-member] Every call this task made has ended. Answer the task with the answers you have and say plainly which part has no answer, or call a member again if another attempt could succeed.", ids[0], ids[1])), "{text}");
    // the formation ended with the entry task: worker's task was canceled
    assert_eq!(
        run.member("worker").one("task_end")["exit_status"],
        "canceled"
    );
    // A timed-out call is a warning on stderr, naming the member's door; a rejected
    // one is not.
    let e = run.stderr();
    let warned: Vec<&str> = e
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("member call "))
        .collect();
    assert_eq!(warned.len(), 1, "{e}");
    assert!(
        warned[0].contains(&format!("member call {} to worker from task ", ids[0]))
            && warned[0].contains("ended timed_out: worker did not answer within 3s.")
            && warned[0].contains("(door http://127.0.0.1:"),
        "{e}"
    );
}

#[test]
fn the_last_allowed_turn_does_not_wait_and_an_early_answer_is_refused_a_second_call() {
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker, slow]}\n  worker: {capsule: worker}\n  slow: {capsule: slow}\n")
        .member(
            "lead",
            "  max_turns: 2\ncapabilities:\n  network: {allow: [localhost]}\n  shell: {allow: [sleep]}\n",
            "- tool_calls:\n    - {name: call-member, input: {member: worker, task: \"a\"}}\n    - {name: call-member, input: {member: slow, task: \"b\"}}\n    - {name: sleep, input: {args: [\"1\"]}}\n    - {name: call-member, input: {member: worker, task: \"c\"}}\n- text: \"done early\"\n",
        )
        .member("worker", "", "- text: \"W\"\n")
        .member(
            "slow",
            "capabilities:\n  shell: {allow: [sleep]}\n",
            "- tool_calls:\n    - {name: sleep, input: {args: [\"3\"]}}\n- text: \"S\"\n",
        );
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.stdout(), "done early\n");
    let lead = run.member("lead");
    let ids = call_ids(&lead);
    assert_eq!(lead.tool_texts()[3], refused_text("call-member", &format!("worker has already answered call {}, so nothing was sent. The answer reaches you as soon as you end your turn: end your turn now by replying without calling a tool.", ids[0])));
    assert!(lead.records("task_continued").is_empty());
    let calls = lead.records("member_call");
    assert_eq!(calls.len(), 2, "{}", run.dump());
    let w = calls.iter().find(|c| c["member"] == "worker").unwrap();
    assert_eq!(w["status"], "completed");
    assert_eq!(w["delivered"], false);
    let s = calls.iter().find(|c| c["member"] == "slow").unwrap();
    assert_eq!(s["status"], "abandoned");
    assert_eq!(s["delivered"], false);
}

/// A fake A2A peer behind a real door.
struct Peer {
    mode: &'static str,
    submitted: Sender<()>,
    offers: std::sync::atomic::AtomicUsize,
    reads: std::sync::atomic::AtomicUsize,
    /// Every offer's message as received, serialized.
    messages: std::sync::Mutex<Vec<Value>>,
}

fn task(id: &str, state: TaskState, msg: Option<&str>) -> Task {
    let mut status = TaskStatus::now(state);
    status.message = msg.map(Message::agent);
    Task {
        id: id.into(),
        context_id: id.into(),
        status,
        artifacts: vec![],
        history: vec![],
        metadata: None,
    }
}

impl TaskHandler for Peer {
    fn submit(&self, m: Message) -> Task {
        self.messages
            .lock()
            .unwrap()
            .push(serde_json::to_value(&m).unwrap());
        let _ = self.submitted.send(());
        let n = self.offers.fetch_add(1, Ordering::SeqCst) + 1;
        let busy = || task(&format!("t{n}"), TaskState::Rejected, Some(BUSY));
        match self.mode {
            "rejected" => task("t1", TaskState::Rejected, Some("task rejected: not today")),
            // The busy words, but not exactly: a trailing space.
            "padded-busy" => task(
                "t1",
                TaskState::Rejected,
                Some("task rejected: capsule is busy "),
            ),
            "completed-at-once" => {
                let mut t = task("t1", TaskState::Completed, None);
                t.artifacts.push(Artifact::text("answer", "TOO-EARLY"));
                t
            }
            "busy-then-rejected" if n == 1 => busy(),
            "busy-then-rejected" => task(
                &format!("t{n}"),
                TaskState::Rejected,
                Some("task rejected: not today"),
            ),
            "busy-then-completed" if n == 1 => busy(),
            "busy-then-completed" => {
                let mut t = task(&format!("t{n}"), TaskState::Completed, None);
                t.artifacts.push(Artifact::text("answer", "TOO-EARLY"));
                t
            }
            "busy-then-canceled" if n == 1 => busy(),
            "busy-then-canceled" => task(
                &format!("t{n}"),
                TaskState::Canceled,
                Some("stopped by its operator"),
            ),
            // SUBMITTED at once, then busy on GetTask, for the first two offers.
            "late-busy" if n <= 2 => task(&format!("t{n}"), TaskState::Submitted, None),
            "late-busy" => task(&format!("t{n}"), TaskState::Working, None),
            _ => task("t1", TaskState::Working, None),
        }
    }
    fn get(&self, id: &str) -> Option<Task> {
        let read = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
        match self.mode {
            // Another task id on every read, completed.
            "shifting" => {
                let mut t = task(&format!("other{read}"), TaskState::Completed, None);
                t.artifacts.push(Artifact::text("answer", "NOT-YOURS"));
                Some(t)
            }
            "late-busy" if id == "t1" || id == "t2" => Some(task(
                id,
                TaskState::Rejected,
                Some("task rejected: capsule is busy"),
            )),
            "late-busy" => {
                let mut t = task(id, TaskState::Completed, None);
                t.artifacts.push(Artifact::text("answer", "LATE-OK"));
                Some(t)
            }
            // The offer's own terminal answer, read again.
            "completed-at-once" | "busy-then-completed" => {
                let mut t = task(id, TaskState::Completed, None);
                t.artifacts.push(Artifact::text("answer", "TOO-EARLY"));
                Some(t)
            }
            "busy-then-canceled" => Some(task(
                id,
                TaskState::Canceled,
                Some("stopped by its operator"),
            )),
            "unknown" => Some(task(
                id,
                TaskState::Unknown("TASK_STATE_BOGUS".into()),
                None,
            )),
            // The British spelling in another casing, as some peers write it.
            "cancelled" => Some(task(
                id,
                TaskState::Unknown("Cancelled".into()),
                Some("stopped by its operator"),
            )),
            "unspecified" => Some(task(
                id,
                TaskState::Unknown("TASK_STATE_UNSPECIFIED".into()),
                None,
            )),
            _ => Some(task(id, TaskState::Working, None)),
        }
    }
    fn cancel(&self, _id: &str) -> Result<Task, CancelError> {
        Err(CancelError::NotFound)
    }
    fn wait_terminal(&self, id: &str, _t: Duration) -> Option<Task> {
        self.get(id)
    }
    fn card(&self) -> AgentCard {
        AgentCard::new("odd", "a fake peer")
    }
}

const BUSY: &str = "task rejected: capsule is busy";

fn peer_formation(mode: &'static str) -> (Formation, Door, crossbeam_channel::Receiver<()>) {
    let (f, door, rx, _peer) = peer_formation_seen(mode);
    (f, door, rx)
}

/// [`peer_formation`], with the peer itself (its offer count and the messages it got).
fn peer_formation_seen(
    mode: &'static str,
) -> (Formation, Door, crossbeam_channel::Receiver<()>, Arc<Peer>) {
    let (tx, rx) = bounded(10);
    let peer = Arc::new(Peer {
        mode,
        submitted: tx,
        offers: Default::default(),
        reads: Default::default(),
        messages: Default::default(),
    });
    let door = Door::start(
        "127.0.0.1:0".parse().unwrap(),
        "peer-token".into(),
        peer.clone(),
        DoorLimits::default(),
    )
    .unwrap();
    let f = Formation::new()
        .roster(&format!("formation: f\nentry: lead\nmembers:\n  lead: {{capsule: lead, calls: [odd]}}\n  odd: {{door: \"{}\", token: {{env: ODD_TOKEN}}}}\n", door.url()))
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n",
            "- tool_calls:\n    - {name: call-member, input: {member: odd, task: \"hello\"}}\n- text: \"waiting\"\n- text: \"LEAD\"\n",
        );
    (f, door, rx, peer)
}

#[test]
fn a_peer_with_an_unknown_task_state_ends_the_call_failed_without_looping() {
    let (f, _door, _rx) = peer_formation("unknown");
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "failed");
    assert_eq!(mc["output"], "odd's door reported the task state `TASK_STATE_BOGUS`, which a member call cannot wait on; the call ended failed");
    assert!(lead.one("task_continued")["text"]
        .as_str()
        .unwrap()
        .starts_with("[call-member] call mcl_"));
}

#[test]
fn a_peer_writing_cancelled_in_another_casing_ends_the_call_canceled() {
    let (f, _door, _rx) = peer_formation("cancelled");
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let mc = run.member("lead").one("member_call");
    assert_eq!(mc["status"], "canceled", "{}", run.dump());
    assert_eq!(mc["output"], "stopped by its operator");
}

#[test]
fn a_peer_with_an_unspecified_task_state_ends_the_call_failed() {
    let (f, _door, _rx) = peer_formation("unspecified");
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let mc = run.member("lead").one("member_call");
    assert_eq!(mc["status"], "failed");
    assert_eq!(mc["output"], "odd's door reported the task state `TASK_STATE_UNSPECIFIED`, which a member call cannot wait on; the call ended failed");
}

/// A fake HTTP peer on loopback that answers each request (one per connection) with
/// `answer(method, path, body)`: a whole HTTP response, or `None` to never answer.
fn raw_peer(answer: fn(&str, &str, &str) -> Option<String>) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let mut len = 0;
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).is_err() || h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            let _ = r.read_exact(&mut body);
            let mut it = line.split_whitespace();
            let (method, path) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
            match answer(method, path, &String::from_utf8_lossy(&body)) {
                Some(resp) => {
                    let _ = conn.write_all(resp.as_bytes());
                }
                None => held.push(conn),
            }
        }
    });
    url
}

fn http_json(status: u16, body: &str) -> String {
    format!("HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
}

fn raw_formation(url: &str, extra: &str) -> Formation {
    Formation::new()
        .roster(&format!("formation: f\nentry: lead\nmembers:\n  lead: {{capsule: lead, calls: [odd]}}\n  odd: {{door: \"{url}\"{extra}}}\n"))
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n",
            "- tool_calls:\n    - {name: call-member, input: {member: odd, task: \"hello\"}}\n- text: \"LEAD\"\n",
        )
}

#[test]
fn a_peer_whose_card_names_only_a2a_0_3_fails_the_call_with_one_clear_error_naming_the_member() {
    let url = raw_peer(|method, path, _| match (method, path) {
        ("GET", "/.well-known/agent-card.json") => Some(http_json(
            200,
            r#"{"name": "old", "url": "http://127.0.0.1:1/", "protocolVersion": "0.3.0", "preferredTransport": "JSONRPC"}"#,
        )),
        _ => Some(http_json(404, "")),
    });
    let f = raw_formation(&url, "");
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let lead = run.member("lead");
    let tc = &lead.records("tool_call")[0];
    assert_eq!(tc["summary"], "Called odd: failed");
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "failed");
    assert_eq!(mc["output"], "odd's door cannot be called: the peer speaks A2A 0.3: its agent card names protocol version 0.3.0 and no 1.x JSON-RPC interface, and mur speaks A2A 1.0 only");
    // Nothing the model sees names the address; the trace and stderr do.
    let content = tc["content"].as_str().unwrap();
    assert!(
        !content.contains("http://") && !content.contains("127.0.0.1"),
        "{content}"
    );
    assert_eq!(mc["door"], url.as_str());
    assert!(mc["detail"].as_str().unwrap().starts_with(&format!(
        "door {url}/.well-known/agent-card.json cannot be called: the peer speaks A2A 0.3"
    )));
    let e = run.stderr();
    assert!(
        e.lines().any(|l| l.contains("WARN")
            && l.contains("to odd from task ")
            && l.contains(&format!(
                "ended failed: door {url}/.well-known/agent-card.json cannot be called"
            ))),
        "{e}"
    );
}

#[test]
fn a_peer_answering_an_a2a_0_3_task_fails_the_call_naming_the_member_and_what_it_found() {
    let url = raw_peer(|method, _, body| match method {
        "GET" => Some(http_json(404, "")),
        _ => {
            let id = serde_json::from_str::<Value>(body).unwrap()["id"].clone();
            let r = json!({"jsonrpc": "2.0", "id": id, "result": {"kind": "task", "id": "t1", "contextId": "c", "status": {"state": "submitted"}}});
            Some(http_json(200, &r.to_string()))
        }
    });
    let f = raw_formation(&url, "");
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let mc = run.member("lead").one("member_call");
    assert_eq!(mc["status"], "failed");
    assert_eq!(mc["output"], "odd's door broke the protocol: SendMessage answered an A2A 0.3 result (`kind: task`) instead of `{\"task\": …}`: the peer speaks A2A 0.3, and mur speaks 1.0");
}

#[test]
fn a_door_that_never_answers_times_out_naming_the_roster_timeout_and_its_value() {
    let url = raw_peer(|_, _, _| None);
    let f = raw_formation(&url, ", request_timeout_secs: 1");
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let mc = run.member("lead").one("member_call");
    assert_eq!(mc["status"], "failed");
    assert_eq!(mc["output"], "odd's door could not be reached: timed out: no answer within the request timeout of 1s (members.odd.request_timeout_secs in roster.yaml)");
    assert!(
        !run.stderr().contains("timeout: global"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_peer_that_died_before_the_call_fails_it_without_showing_its_address() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    let f = raw_formation(&url, "");
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let lead = run.member("lead");
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "failed");
    let out = mc["output"].as_str().unwrap();
    assert!(
        out.starts_with("odd's door could not be reached: "),
        "{out}"
    );
    assert!(!lead.tool_texts().concat().contains("127.0.0.1"), "{out}");
    assert!(mc["detail"].as_str().unwrap().contains(&url));
    assert!(
        run.stderr().contains(&format!(
            "ended failed: door {url}/.well-known/agent-card.json is unreachable"
        )),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_peer_answering_get_task_with_another_task_id_fails_the_call() {
    let (f, door, _rx) = peer_formation("shifting");
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    let start = lead.one("member_call_start");
    assert_eq!(start["member_task"], "t1");
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "failed", "{}", run.dump());
    let out = mc["output"].as_str().unwrap();
    // The model is told of the member, never of its door's address.
    assert_eq!(
        out,
        "odd's door broke the protocol: GetTask asked for task t1 and was answered task other1"
    );
    assert!(!lead.tool_texts().concat().contains("http://"));
    // The trace and stderr keep the address.
    assert_eq!(mc["door"], door.url().as_str());
    let detail = mc["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!("door {}", door.url())),
        "{detail}"
    );
    let warn = format!("member call {} to odd from task ", call_ids(&lead)[0]);
    let e = run.stderr();
    assert!(
        e.lines().any(|l| l.contains("WARN")
            && l.contains(&warn)
            && l.contains("ended failed: door http://127.0.0.1:")),
        "{e}"
    );
    assert_eq!(mc["member_task"], "t1");
    assert!(!lead.one("task_continued")["text"]
        .as_str()
        .unwrap()
        .contains("NOT-YOURS"));
}

#[test]
fn a_peer_that_takes_an_offer_then_shows_it_rejected_busy_is_offered_again() {
    let (f, _door, _rx) = peer_formation("late-busy");
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    // The tool call saw offer 1 taken: started, with its task id.
    let tc = &lead.records("tool_call")[0];
    let id = tc["member_call_id"].as_str().unwrap();
    assert_eq!(tc["content"], started_text(id, "odd", "t1"));
    // Offers 1 and 2 were taken, then turned away busy; offer 3 answered.
    let starts = lead.records("member_call_start");
    let tasks: Vec<&Value> = starts.iter().map(|r| &r["member_task"]).collect();
    assert_eq!(tasks, [&json!("t1"), &json!("t2"), &json!("t3")]);
    let offers: Vec<&Value> = starts.iter().map(|r| &r["offer"]).collect();
    assert_eq!(offers, [&json!(1), &json!(2), &json!(3)]);
    let busy = lead.records("member_call_busy");
    let offers: Vec<&Value> = busy.iter().map(|r| &r["offer"]).collect();
    assert_eq!(offers, [&json!(1), &json!(2)]);
    assert!(busy
        .iter()
        .all(|r| r["call_id"] == id && r["member"] == "odd"));
    // The busy schedule: the second offer 1 s after the first refusal, the third 2 s
    // after the second (plus up to 250 ms jitter each). Bounded from below only: a
    // loaded machine may add to each wait, never take from it, and g2 past 2 s shows
    // the wait doubled.
    let gap = |a: &Value, b: &Value| ms(&b["ts"]).duration_since(ms(&a["ts"])).unwrap();
    let g1 = gap(&busy[0], &starts[1]);
    let g2 = gap(&busy[1], &starts[2]);
    assert!(g1 >= Duration::from_millis(1000), "{g1:?}");
    assert!(g2 >= Duration::from_millis(2000), "{g2:?}");
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "completed", "{}", run.dump());
    assert_eq!(mc["output"], "LATE-OK");
}

#[test]
fn a_peer_refusing_for_another_reason_is_rejected_in_the_same_turn() {
    let (f, _door, _rx) = peer_formation("rejected");
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    let tc = &lead.records("tool_call")[0];
    let id = tc["member_call_id"].as_str().unwrap();
    assert_eq!(tc["status"], "failed");
    assert_eq!(tc["summary"], "Called odd: rejected");
    assert_eq!(tc["content"], format!("<untrusted-content source=tool:call-member>\n{{\"call_id\":\"{id}\",\"member\":\"odd\",\"status\":\"rejected\",\"output\":\"odd did not take the task: not today\"}}\n</untrusted-content>\n[call-member] Call {id} to odd ended rejected, with no answer from odd. Do not present an answer of your own as odd's."));
    assert!(lead.records("member_call_busy").is_empty());
}

#[test]
fn a_peer_that_dies_mid_call_ends_it_unreachable() {
    let (f, door, rx) = peer_formation("working");
    let killer = std::thread::spawn(move || {
        rx.recv_timeout(Duration::from_secs(20)).unwrap();
        std::thread::sleep(Duration::from_millis(700));
        door.shutdown();
    });
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    killer.join().unwrap();
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "unreachable", "{}", run.dump());
    let out = mc["output"].as_str().unwrap();
    assert!(out.starts_with("odd's door stopped answering: "), "{out}");
    assert!(
        !out.contains("http://") && !out.contains("127.0.0.1"),
        "{out}"
    );
    assert!(mc["detail"].as_str().unwrap().contains("http://127.0.0.1:"));
    let e = run.stderr();
    assert!(
        e.lines().any(|l| l.contains("WARN")
            && l.contains("to odd from task ")
            && l.contains("ended unreachable: door http://127.0.0.1:")),
        "{e}"
    );
}

#[test]
fn a_member_whose_session_crashes_fails_the_call_and_the_formation_goes_on() {
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker]}\n  worker: {capsule: worker}\n")
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n",
            "- tool_calls:\n    - {name: call-member, input: {member: worker, task: \"CRASH-ME\"}}\n- text: \"waiting\"\n- text: \"LEAD\"\n",
        )
        .member("worker", "", "- text: \"W\"\n");
    let run = f.run_with("go", &[("MUR_DEBUG_PANIC_ON_TASK", "CRASH-ME")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.stdout(), "LEAD\n");
    let mc = run.member("lead").one("member_call");
    assert_eq!(mc["status"], "failed");
    assert_eq!(mc["output"], "worker's session crashed");
}

#[test]
fn a_bad_roster_is_refused_with_every_diagnostic() {
    let f = Formation::new()
        .roster("formation: f\nentry: leed\nmembers:\n  lead: {capsule: lead, calls: [wroker]}\n");
    let run = f.run("go");
    assert_eq!(run.code(), 2);
    let e = run.stderr();
    assert!(
        e.contains(
            "roster.yaml:2:8: entry: `leed` is not a member of this roster (did you mean `lead`?)"
        ),
        "{e}"
    );
    assert!(
        e.contains(
            "members.lead.calls[0]: `wroker` is not a member of this roster (did you mean `lead`?)"
        ) || e.contains("members.lead.calls[0]: `wroker` is not a member of this roster"),
        "{e}"
    );
}

// --- interop with a peer written with the official a2a-sdk server -------------------

/// The bearer token of the SDK peer.
const SDK_TOKEN: &str = "sdk-peer-token";

fn sdk_formation(url: &str) -> Formation {
    Formation::new()
        .roster(&format!("formation: f\nentry: lead\nmembers:\n  lead: {{capsule: lead, calls: [sdk]}}\n  sdk: {{door: \"{url}\", token: {{env: SDK_TOKEN}}}}\n"))
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n",
            "- tool_calls:\n    - {name: call-member, input: {member: sdk, task: \"hello sdk\"}}\n- text: \"waiting\"\n- text: \"LEAD\"\n",
        )
}

#[test]
fn call_member_to_an_sdk_peer_that_is_busy_once_then_answers() {
    let server = sdk::Server::start(SDK_TOKEN, &["--busy", "1"], std::process::Stdio::null());
    let f = sdk_formation(&server.url);
    let run = f.run_with("go", &[("SDK_TOKEN", SDK_TOKEN)]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    assert_eq!(lead.records("tool_call")[0]["summary"], "Called sdk: busy");
    assert_eq!(lead.records("member_call_busy").len(), 1);
    assert_eq!(lead.one("member_call_start")["offer"], 2);
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "completed", "{}", run.dump());
    assert_eq!(mc["output"], "echo: hello sdk");
    // The roster gave the agent's base address; its card named the endpoint.
    assert_eq!(
        mc["door"],
        format!("{} (JSON-RPC endpoint {})", server.url, server.endpoint)
    );
    let id = &call_ids(&lead)[0];
    assert_eq!(
        lead.one("task_continued")["text"],
        format!("[call-member] call {id} to sdk ended completed:\n<untrusted-content source=member:sdk>\necho: hello sdk\n</untrusted-content>\n\n[call-member] Every call this task made has ended, and the answers are above. Answer the task with them now; call a member again only to give it new work.")
    );
}

#[test]
fn call_member_to_an_sdk_peer_given_by_its_json_rpc_endpoint() {
    let server = sdk::Server::start(SDK_TOKEN, &[], std::process::Stdio::null());
    let f = sdk_formation(&server.endpoint);
    let run = f.run_with("go", &[("SDK_TOKEN", SDK_TOKEN)]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let mc = run.member("lead").one("member_call");
    assert_eq!(mc["status"], "completed", "{}", run.dump());
    assert_eq!(mc["output"], "echo: hello sdk");
    assert_eq!(mc["door"], server.endpoint.as_str());
}

#[test]
fn call_member_to_an_sdk_peer_that_fails() {
    let server = sdk::Server::start(SDK_TOKEN, &["--mode", "fail"], std::process::Stdio::null());
    let f = sdk_formation(&server.url);
    let run = f.run_with("go", &[("SDK_TOKEN", SDK_TOKEN)]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    assert_eq!(
        lead.records("tool_call")[0]["summary"],
        "Called sdk: started"
    );
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "failed");
    assert_eq!(mc["output"], "failed: asked to fail");
    let id = &call_ids(&lead)[0];
    assert!(lead.one("task_continued")["text"].as_str().unwrap().starts_with(&format!("[call-member] call {id} to sdk ended failed, with no answer from sdk:\n<untrusted-content source=member:sdk>\nfailed: asked to fail\n</untrusted-content>\n\n[call-member] No answer came from: sdk (call {id}, failed).")));
}

#[test]
fn mur_door_serves_a_capsule_refuses_when_busy_cancels_and_ends_on_sigterm() {
    let c = support::Capsule::scripted(
        &["sleep"],
        "",
        "- tool_calls:\n    - {name: sleep, input: {args: [\"30\"]}}\n- text: \"done\"\n",
    );
    // no token: refused
    let out = c
        .mur()
        .arg("door")
        .arg(&c.dir)
        .env_remove("MURMUR_DOOR_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("mur door needs a bearer token"));

    let (mut child, client) = support::spawn_door(&c);
    // the client's contextId is kept on every read of the task
    let mut msg = mur::a2a::types::Message::user("work");
    msg.context_id = Some("ctx-from-client".into());
    let t1 = client.send(msg, true).unwrap();
    assert!(!t1.is_terminal());
    assert_eq!(t1.context_id, "ctx-from-client");
    assert_eq!(
        client.get_task(&t1.id).unwrap().context_id,
        "ctx-from-client"
    );
    let t2 = client.send_message("more work", None, true).unwrap();
    assert_eq!(t2.status.state, TaskState::Rejected);
    assert_eq!(
        t2.status.message_text().as_deref(),
        Some("task rejected: capsule is busy")
    );
    std::thread::sleep(Duration::from_millis(300));
    let canceled = client.cancel_task(&t1.id).unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    assert_eq!(
        client.get_task(&t1.id).unwrap().status.state,
        TaskState::Canceled
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let trace = support::read_trace(&c.records);
    let ends: Vec<&Value> = trace.iter().filter(|r| r["type"] == "task_end").collect();
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["exit_status"], "canceled");
    assert_eq!(trace.last().unwrap()["type"], "session_end");
}

/// A member's door in front of its board, with the session played by the test: the
/// door URL, the board and the session's inbox.
fn member_door() -> (
    Door,
    Arc<mur::formation::board::Board>,
    crossbeam_channel::Receiver<mur::formation::board::Incoming>,
) {
    use mur::formation::board::Board;
    use mur::formation::wire::MemberHandler;
    let (board, inbox) = Board::new(mur::manifest::TaskAcceptance::Reject);
    let board = Arc::new(board);
    let door = Door::start(
        "127.0.0.1:0".parse().unwrap(),
        "member-token".into(),
        Arc::new(MemberHandler::new(board.clone(), "worker", "works")),
        DoorLimits::default(),
    )
    .unwrap();
    (door, board, inbox)
}

/// `GetTask` over raw HTTP: the `result` object exactly as the door wrote it.
fn raw_get_task(door: &Door, id: &str) -> String {
    use std::io::{Read, Write};
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}}).to_string();
    let mut s = std::net::TcpStream::connect(door.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "POST / HTTP/1.1\r\nAuthorization: Bearer member-token\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let body = out.split_once("\r\n\r\n").unwrap().1;
    let v: Value = serde_json::from_str(body).unwrap();
    serde_json::to_string(&v["result"]["status"]).unwrap()
}

#[test]
fn a_terminal_member_task_reads_byte_identical_status_after_cancel_complete_or_fail() {
    use mur::a2a::A2aClient;
    use mur::formation::board::Final;
    use mur::formation::link::State;

    let (door, board, inbox) = member_door();
    let client = A2aClient::new(door.url(), "member-token");
    let finals = [
        ("canceled", None),
        (
            "completed",
            Some(Final {
                state: State::Completed,
                message: None,
                answer: Some("the answer".into()),
                no_answer: false,
                no_answer_below: vec![],
            }),
        ),
        (
            "failed",
            Some(Final {
                state: State::Failed,
                message: Some("it broke".into()),
                answer: None,
                no_answer: false,
                no_answer_below: vec![],
            }),
        ),
    ];
    for (case, end) in finals {
        let t = client.send_message(case, None, true).unwrap();
        let inc = inbox.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(board.start(&inc.id));
        board.status(&inc.id, "working on it");
        let ended = match end {
            None => {
                // The session ends the task once the cancel reaches it.
                let b = board.clone();
                let session = std::thread::spawn(move || {
                    let _ = inc.cancel.recv_timeout(Duration::from_secs(5));
                    b.finish(
                        &inc.id,
                        Final {
                            state: State::Canceled,
                            message: Some("canceled by request".into()),
                            answer: None,
                            no_answer: false,
                            no_answer_below: vec![],
                        },
                    );
                });
                let c = client.cancel_task(&t.id).unwrap();
                session.join().unwrap();
                c
            }
            Some(f) => {
                board.finish(&inc.id, f);
                client.get_task(&t.id).unwrap()
            }
        };
        assert!(ended.is_terminal(), "{case}");
        std::thread::sleep(Duration::from_millis(20));
        let first = raw_get_task(&door, &t.id);
        std::thread::sleep(Duration::from_millis(20));
        let second = raw_get_task(&door, &t.id);
        assert_eq!(first, second, "{case}: the status changed between reads");
        assert_eq!(
            serde_json::to_string(&ended.status).unwrap(),
            first,
            "{case}: the first answer and a later read differ"
        );
        // The whole task reads the same too (artifact ids included).
        let a = serde_json::to_value(client.get_task(&t.id).unwrap()).unwrap();
        let b = serde_json::to_value(client.get_task(&t.id).unwrap()).unwrap();
        assert_eq!(a, b, "{case}");
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[test]
fn one_members_end_never_kills_another_members_escaped_process() {
    // worker starts a process that leaves its group and clears its environment, then
    // checks 3 s later that it is still alive; critic ends its task after 1 s. critic's
    // end must not kill worker's process; the formation's end does.
    let worker = r#"- tool_calls:
    - {name: sh, input: {args: ["-c", "env -i setsid sleep 60 >/dev/null 2>&1 & echo $! > esc.pid; sleep 3; kill -0 $(cat esc.pid) && echo escapee-alive"]}}
- text: worker done
"#;
    let critic =
        "- tool_calls:\n    - {name: sleep, input: {args: [\"1\"]}}\n- text: critic done\n";
    let lead = "- tool_calls:\n    - {name: call-member, input: {member: worker, task: w}}\n    - {name: call-member, input: {member: critic, task: c}}\n- text: waiting\n- text: lead done\n";
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker, critic]}\n  worker: {capsule: worker}\n  critic: {capsule: critic}\n")
        .member("lead", "capabilities:\n  network: {allow: [localhost]}\n", lead)
        .member("worker", "capabilities:\n  shell: {allow: [sh]}\n", worker)
        .member("critic", "capabilities:\n  shell: {allow: [sleep]}\n", critic);
    let run = f.run("t");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let w = run.member("worker");
    assert!(
        w.tool_texts()[0].contains("escapee-alive"),
        "{}",
        w.tool_texts()[0]
    );
    assert!(run.member("critic").records("survivor_killed").is_empty());
    let pid: i32 = std::fs::read_to_string(f.dir.join("worker").join("work").join("esc.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(pid), "the escapee outlived the formation");
    // Whoever killed it said so: worker's own end, when a walk saw the process while
    // it still had worker's shell as its parent (critic's end walks mur's tree while
    // that shell runs), else the formation's end.
    let by_worker = w
        .records("survivor_killed")
        .iter()
        .any(|r| r["pid"] == serde_json::json!(pid));
    assert!(
        by_worker
            || run
                .stderr()
                .contains(&format!("mur: killed pid {pid} (sleep 60)")),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_member_task_ended_by_the_formation_says_so_not_a_signal() {
    // worker is still at work when lead answers: its task ends with the formation.
    let worker = "- tool_calls:\n    - {name: sleep, input: {args: [\"30\"]}}\n- text: never\n";
    let lead = "- tool_calls:\n    - {name: call-member, input: {member: worker, task: w}}\n- text: lead done without waiting\n";
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker]}\n  worker: {capsule: worker}\n")
        .member("lead", "inference:\n  max_turns: 1\ncapabilities:\n  network: {allow: [localhost]}\n", lead)
        .member("worker", "capabilities:\n  shell: {allow: [sleep]}\n", worker);
    let f = {
        // max_turns must sit inside the inference block the helper wrote
        let p = f.dir.join("lead/murmur.yaml");
        let m = std::fs::read_to_string(&p)
            .unwrap()
            .replace("inference:\n  max_turns: 1\n", "")
            .replace("inference:\n", "inference:\n  max_turns: 1\n");
        std::fs::write(&p, m).unwrap();
        f
    };
    let run = f.run("t");
    let end = run.member("worker").one("task_end");
    assert_eq!(end["exit_status"], "canceled", "{}", run.dump());
    assert_eq!(end["error"], "the formation ended before this task did");
}

#[test]
fn a_roster_run_reusing_a_records_dir_is_refused_and_runtime_dirs_are_removed() {
    let lead = "- text: lead done\n";
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker]}\n  worker: {capsule: worker}\n")
        .member("lead", "capabilities:\n  network: {allow: [localhost]}\n", lead)
        .member("worker", "", "- text: w\n");
    let run = f.run("t");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let run_dir = f.home.join("run");
    assert!(
        !run_dir.exists() || std::fs::read_dir(&run_dir).unwrap().next().is_none(),
        "runtime dirs left behind"
    );
    let again = f.run("t");
    assert_eq!(again.code(), 2);
    assert!(
        again.stderr().contains("member `lead`: --records-dir ")
            && again
                .stderr()
                .contains("already holds a session's trace.jsonl"),
        "{}",
        again.stderr()
    );
    assert_eq!(
        std::fs::read_to_string(f.records.join("lead/trace.jsonl"))
            .unwrap()
            .lines()
            .filter(|l| l.contains("session_start"))
            .count(),
        1
    );
}

#[test]
fn mur_check_roster_checks_a_formation_without_starting_it() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/formation/roster.yaml"
    );
    let f = Formation::new();
    let out = f
        .mur()
        .args(["check", "--roster", example])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout)
        .ends_with(": ok (3 local member(s): lead, worker, critic)\n"));
    assert!(!f.home.join("run").exists(), "check stages nothing");
    let out = f.mur().args(["check", example]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("looks like a roster.yaml: check it with `mur check --roster "));
}

// --- the calling task ends while a re-offer is on its way ------------------------

/// What a peer does with the offer it holds while the calling task ends.
#[derive(Clone, Copy, PartialEq)]
enum InFlight {
    /// Takes it: `TASK_STATE_WORKING`, task `t2`.
    Take,
    /// Turns it away busy.
    Busy,
    /// Says nothing until the test lets it go (after the run).
    Silent,
}

/// A peer that turns the first offer away busy and holds the second until `gate`
/// opens, then answers as `mode` says. Every CancelTask id goes to `cancels`.
struct SlowPeer {
    mode: InFlight,
    gate: crossbeam_channel::Receiver<()>,
    offers: std::sync::atomic::AtomicUsize,
    cancels: Sender<String>,
}

impl TaskHandler for SlowPeer {
    fn submit(&self, _m: Message) -> Task {
        let n = self.offers.fetch_add(1, Ordering::SeqCst) + 1;
        let busy = || {
            task(
                &format!("t{n}"),
                TaskState::Rejected,
                Some("task rejected: capsule is busy"),
            )
        };
        if n == 1 {
            return busy();
        }
        let _ = self.gate.recv_timeout(Duration::from_secs(20));
        match self.mode {
            InFlight::Take => task(&format!("t{n}"), TaskState::Working, None),
            InFlight::Busy | InFlight::Silent => busy(),
        }
    }
    fn get(&self, id: &str) -> Option<Task> {
        Some(task(id, TaskState::Working, None))
    }
    fn cancel(&self, id: &str) -> Result<Task, CancelError> {
        let _ = self.cancels.send(id.to_string());
        Ok(task(id, TaskState::Canceled, Some("canceled")))
    }
    fn wait_terminal(&self, id: &str, _t: Duration) -> Option<Task> {
        self.get(id)
    }
    fn card(&self) -> AgentCard {
        AgentCard::new("odd", "a slow fake peer")
    }
}

/// lead calls `odd` (busy), sleeps `sleep` seconds while the runtime re-offers, then
/// ends its last allowed turn: its task ends with the second offer in flight. For
/// [`InFlight::Take`] and [`InFlight::Busy`] the peer answers that offer 300 ms after
/// lead's last inference is in its trace; [`InFlight::Silent`] answers only after the
/// run. Returns the formation (its records), the run, the peer's offer count and the CancelTask ids it received.
fn in_flight_run(
    mode: InFlight,
    sleep: u32,
) -> (
    Formation,
    support::FormationRun,
    Arc<SlowPeer>,
    crossbeam_channel::Receiver<String>,
) {
    let (gate_tx, gate_rx) = bounded(1);
    let (cancel_tx, cancel_rx) = crossbeam_channel::unbounded();
    let peer = Arc::new(SlowPeer {
        mode,
        gate: gate_rx,
        offers: Default::default(),
        cancels: cancel_tx,
    });
    let door = Door::start(
        "127.0.0.1:0".parse().unwrap(),
        "peer-token".into(),
        peer.clone(),
        DoorLimits::default(),
    )
    .unwrap();
    let f = Formation::new()
        .roster(&format!("formation: f\nentry: lead\nmembers:\n  lead: {{capsule: lead, calls: [odd]}}\n  odd: {{door: \"{}\", token: {{env: ODD_TOKEN}}}}\n", door.url()))
        .member(
            "lead",
            "  max_turns: 2\ncapabilities:\n  network: {allow: [localhost]}\n  shell: {allow: [sleep]}\n",
            &format!("- tool_calls:\n    - {{name: call-member, input: {{member: odd, task: \"hello\"}}}}\n    - {{name: sleep, input: {{args: [\"{sleep}\"]}}}}\n- text: \"done early\"\n"),
        );
    // Opens the gate once lead's last inference (turn 2) is in its trace: its task is
    // then ending, and the runtime waits for the answer to the offer in flight.
    let trace = f.records.join("lead/trace.jsonl");
    let opener_tx = gate_tx.clone();
    let opener = std::thread::spawn(move || {
        if mode == InFlight::Silent {
            return;
        }
        let until = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < until {
            let text = std::fs::read_to_string(&trace).unwrap_or_default();
            if text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .any(|r| r["type"] == "inference" && r["turn"] == 2)
            {
                // The calling task ends right after its last turn; the offer is
                // answered well inside the 6 s grace it waits for.
                std::thread::sleep(Duration::from_millis(1500));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = opener_tx.send(());
    });
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    opener.join().unwrap();
    // A silent peer's held offer is let go now, so the door can shut down.
    drop(gate_tx);
    drop(door);
    (f, run, peer, cancel_rx)
}

#[test]
fn calling_task_ends_while_an_offer_is_on_its_way_and_the_member_takes_it() {
    let (_f, run, peer, cancels) = in_flight_run(InFlight::Take, 3);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.stdout(), "done early\n");
    let lead = run.member("lead");
    let id = &call_ids(&lead)[0];
    assert_eq!(lead.records("tool_call")[0]["summary"], "Called odd: busy");
    assert_eq!(lead.one("member_call_busy")["offer"], 1);
    let start = lead.one("member_call_start");
    assert_eq!(start["offer"], 2);
    assert_eq!(start["member_task"], "t2");
    let mc = lead.one("member_call");
    assert_eq!(mc["call_id"], id.as_str());
    assert_eq!(mc["status"], "abandoned", "{}", run.dump());
    assert_eq!(
        mc["output"],
        "the calling task ended just after odd took the task; a cancel was sent to odd"
    );
    assert_eq!(mc["never_held"], false);
    assert_eq!(mc["member_task"], "t2");
    assert_eq!(mc["delivered"], false);
    // The runtime sent that task CancelTask, and only that one.
    assert_eq!(
        cancels.recv_timeout(Duration::from_secs(5)).as_deref(),
        Ok("t2")
    );
    assert!(cancels.try_recv().is_err());
    assert_eq!(peer.offers.load(Ordering::SeqCst), 2);
}

#[test]
fn calling_task_ends_while_an_offer_is_on_its_way_and_the_member_stays_silent() {
    let (_f, run, peer, cancels) = in_flight_run(InFlight::Silent, 2);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    assert_eq!(lead.one("member_call_busy")["offer"], 1);
    assert!(lead.records("member_call_start").is_empty());
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "abandoned", "{}", run.dump());
    assert_eq!(
        mc["output"],
        "the calling task ended while an offer to odd was in flight; odd may hold the task"
    );
    assert_eq!(mc["never_held"], false);
    assert_eq!(mc["member_task"], Value::Null);
    assert_eq!(mc["delivered"], false);
    // The task waited about 6 s for the offer's answer before it ended.
    let last = lead
        .records("inference")
        .into_iter()
        .find(|r| r["turn"] == 2)
        .unwrap();
    let waited = ms(&lead.one("task_end")["ts"])
        .duration_since(ms(&last["ts"]))
        .unwrap();
    // At least the 6 s grace (less the trace's millisecond rounding), and nowhere
    // near the call's own deadline.
    assert!(
        waited >= Duration::from_millis(5500) && waited < Duration::from_secs(60),
        "{waited:?}"
    );
    assert!(cancels.try_recv().is_err(), "no cancel without a task id");
    assert_eq!(peer.offers.load(Ordering::SeqCst), 2);
}

#[test]
fn calling_task_ends_while_an_offer_is_on_its_way_and_the_member_turns_it_away_busy() {
    let (_f, run, peer, cancels) = in_flight_run(InFlight::Busy, 3);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    let busy = lead.records("member_call_busy");
    let offers: Vec<&Value> = busy.iter().map(|r| &r["offer"]).collect();
    assert_eq!(offers, [&json!(1), &json!(2)], "{}", run.dump());
    assert!(lead.records("member_call_start").is_empty());
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "abandoned");
    assert_eq!(
        mc["output"],
        "the calling task ended before odd took the task; odd was busy and was never handed it"
    );
    assert_eq!(mc["never_held"], true);
    assert_eq!(mc["delivered"], false);
    // That offer's member_call_busy is written before the call is accounted for, and
    // the second offer came after lead's last inference began: it was in flight.
    let trace = lead.trace();
    let pos = |pred: &dyn Fn(&Value) -> bool| trace.iter().position(pred).unwrap();
    assert!(
        pos(&|r| r["type"] == "member_call_busy" && r["offer"] == 2)
            < pos(&|r| r["type"] == "member_call")
    );
    // No offer after the calling task ended, and no cancel.
    assert_eq!(peer.offers.load(Ordering::SeqCst), 2);
    assert!(cancels.try_recv().is_err());
}

// --- a member session behind its own door, played in process -----------------------

/// A peer reached over HTTP: each offer makes a WORKING task (or, with `refuse`, is
/// turned away with that status message). Its tasks stay WORKING until `done` opens, then complete with
/// `answer`. With `hold`, each SendMessage waits until it opens.
struct GatedPeer {
    answer: &'static str,
    refuse: Option<&'static str>,
    hold: Option<crossbeam_channel::Receiver<()>>,
    done: crossbeam_channel::Receiver<()>,
    finished: std::sync::atomic::AtomicBool,
    cancels: Sender<String>,
}

impl GatedPeer {
    fn start(
        answer: &'static str,
        refuse: Option<&'static str>,
        hold: Option<crossbeam_channel::Receiver<()>>,
        done: crossbeam_channel::Receiver<()>,
        cancels: Sender<String>,
    ) -> Door {
        let peer = GatedPeer {
            answer,
            refuse,
            hold,
            done,
            finished: Default::default(),
            cancels,
        };
        Door::start(
            "127.0.0.1:0".parse().unwrap(),
            "peer-token".into(),
            Arc::new(peer),
            DoorLimits::default(),
        )
        .unwrap()
    }
}

impl TaskHandler for GatedPeer {
    fn submit(&self, _m: Message) -> Task {
        if let Some(h) = &self.hold {
            let _ = h.recv_timeout(Duration::from_secs(20));
        }
        if let Some(why) = self.refuse {
            return task("r1", TaskState::Rejected, Some(why));
        }
        task(&format!("{}-1", self.answer), TaskState::Working, None)
    }
    fn get(&self, id: &str) -> Option<Task> {
        if self.done.try_recv().is_ok() {
            self.finished.store(true, Ordering::SeqCst);
        }
        if !self.finished.load(Ordering::SeqCst) {
            return Some(task(id, TaskState::Working, None));
        }
        let mut t = task(id, TaskState::Completed, None);
        t.artifacts.push(Artifact::text("answer", self.answer));
        Some(t)
    }
    fn cancel(&self, id: &str) -> Result<Task, CancelError> {
        let _ = self.cancels.send(id.to_string());
        Ok(task(id, TaskState::Canceled, None))
    }
    fn wait_terminal(&self, id: &str, _t: Duration) -> Option<Task> {
        self.get(id)
    }
    fn card(&self) -> AgentCard {
        AgentCard::new("gated", "a gated fake peer")
    }
}

/// The member `helper` run in this process the way `mur run --roster` runs a called
/// member: a script-driver session serving its board under `after_task: sleep`,
/// behind its own door (bearer `member-token`), calling the given peers over HTTP.
struct LiveMember {
    root: tempfile::TempDir,
    door: Option<Door>,
    client: mur::a2a::A2aClient,
    shutdown: mur::signals::ShutdownHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LiveMember {
    fn start(script: &str, callees: &[(&str, String)]) -> LiveMember {
        use mur::formation::board::Board;
        use mur::formation::link::Link;
        use mur::formation::wire::{HttpLink, MemberHandler};
        use mur::session::{MemberRole, SessionSpec};

        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("helper");
        std::fs::create_dir_all(dir.join("work")).unwrap();
        std::fs::write(dir.join("murmur.yaml"), "name: helper\nworkdir: work\ninference:\n  driver: s\n  choices:\n    s: {driver: script, script: replies.yaml}\ncapabilities:\n  network: {allow: [localhost]}\n").unwrap();
        std::fs::write(dir.join("replies.yaml"), script).unwrap();
        let names: Vec<String> = callees.iter().map(|(n, _)| n.to_string()).collect();
        let loaded = mur::staging::load_capsule(&dir, &names).unwrap();
        let staged = mur::staging::stage_member(
            &root.path().join("home"),
            &loaded.dir,
            &loaded.text,
            &loaded.manifest,
            &names,
        )
        .unwrap();
        let system_prompt = mur::staging::system_prompt(&loaded.dir, &loaded.manifest).unwrap();
        let (board, inbox) = Board::new(loaded.manifest.task_acceptance);
        let board = Arc::new(board);
        let door = Door::start(
            "127.0.0.1:0".parse().unwrap(),
            "member-token".into(),
            Arc::new(MemberHandler::new(board.clone(), "helper", "helps")),
            DoorLimits::default(),
        )
        .unwrap();
        let mut roster = vec!["lead".to_string(), "helper".to_string()];
        roster.extend(names.iter().cloned());
        let spec = SessionSpec {
            manifest: loaded.manifest,
            staged,
            records_dir: root.path().join("records"),
            deadline: None,
            choice: "s".into(),
            system_prompt,
            member: Some(MemberRole {
                name: "helper".into(),
                callees: callees
                    .iter()
                    .map(|(n, url)| {
                        let l: Arc<dyn Link> = Arc::new(HttpLink::new(url, "peer-token"));
                        (n.to_string(), l)
                    })
                    .collect(),
                roster: Arc::new(roster),
                call_deadline: Duration::from_secs(600),
            }),
            peer_files: None,
        };
        let shutdown = mur::signals::ShutdownHandle::new();
        let rx = shutdown.receiver();
        let thread = std::thread::spawn(move || {
            mur::session::serve(
                spec,
                board,
                inbox,
                mur::manifest::AfterTask::Sleep,
                rx,
                mur::progress::Progress::none(),
            )
            .unwrap();
        });
        let client = mur::a2a::A2aClient::new(door.url(), "member-token");
        LiveMember {
            root,
            door: Some(door),
            client,
            shutdown,
            thread: Some(thread),
        }
    }

    /// Reads the task through the door until its status message is `want` (state
    /// WORKING), or panics after 20 s naming what it saw.
    fn wait_status(&self, id: &str, want: &str) -> Task {
        let until = std::time::Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        loop {
            let t = self.client.get_task(id).unwrap();
            let m = t.status.message_text();
            if m.as_deref() == Some(want) {
                assert_eq!(t.status.state, TaskState::Working, "{want}");
                return t;
            }
            if seen.last() != Some(&m) {
                seen.push(m);
            }
            assert!(
                std::time::Instant::now() < until && !t.is_terminal(),
                "never saw {want:?}; saw {seen:?}, now {:?}",
                t.status.state
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Ends the session and returns its trace.
    fn stop(&mut self) -> Vec<Value> {
        self.shutdown.fire(0);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        if let Some(d) = self.door.take() {
            d.shutdown();
        }
        support::read_trace(&self.root.path().join("records"))
    }
}

fn of_type<'a>(trace: &'a [Value], kind: &str) -> Vec<&'a Value> {
    trace.iter().filter(|r| r["type"] == kind).collect()
}

#[test]
fn waiting_member_shows_calls_outstanding_then_continuing_through_its_door() {
    let (cancel_tx, _cancels) = crossbeam_channel::unbounded();
    let (done1, done1_rx) = bounded(1);
    let (done2, done2_rx) = bounded(1);
    let (hold3, hold3_rx) = bounded(1);
    let (_done3, done3_rx) = bounded::<()>(1);
    let p1 = GatedPeer::start("P1-ANSWER", None, None, done1_rx, cancel_tx.clone());
    let p2 = GatedPeer::start("P2-ANSWER", None, None, done2_rx, cancel_tx.clone());
    // p3's SendMessage is held while the test reads the continuing status: the tool
    // call of the continued turn is then running and the status cannot move on.
    let p3 = GatedPeer::start(
        "P3",
        Some("task rejected: not today"),
        Some(hold3_rx),
        done3_rx,
        cancel_tx,
    );
    let script = "- tool_calls:\n    - {name: call-member, input: {member: p1, task: one}}\n    - {name: call-member, input: {member: p2, task: two}}\n- text: waiting\n- tool_calls:\n    - {name: call-member, input: {member: p3, task: three}}\n- text: HELPER-DONE\n";
    let mut m = LiveMember::start(
        script,
        &[("p1", p1.url()), ("p2", p2.url()), ("p3", p3.url())],
    );
    let t = m.client.send_message("review", None, true).unwrap();
    // Once when the wait starts...
    m.wait_status(&t.id, "waiting on call-member: 2 call(s) outstanding");
    done1.send(()).unwrap();
    // ...again with the new count when an answer arrives while another is out...
    m.wait_status(&t.id, "waiting on call-member: 1 call(s) outstanding");
    done2.send(()).unwrap();
    // ...then the continuation.
    m.wait_status(&t.id, "continuing with 2 member answer(s)");
    // p3 is held: the member is still busy with the task, so a new one is refused.
    let end = m.client.send_message("noop", None, true).unwrap();
    assert_eq!(end.status.state, TaskState::Rejected, "still busy");
    hold3.send(()).unwrap();
    let mut last = m.client.get_task(&t.id).unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while !last.is_terminal() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
        last = m.client.get_task(&t.id).unwrap();
    }
    assert_eq!(last.status.state, TaskState::Completed);
    assert_eq!(last.answer_text(), "HELPER-DONE");
    let trace = m.stop();
    let cont = of_type(&trace, "task_continued");
    assert_eq!(cont.len(), 1);
    assert_eq!(cont[0]["answers"], 2);
    let text = cont[0]["text"].as_str().unwrap();
    assert!(text.contains("\n<untrusted-content source=member:p1>\nP1-ANSWER\n</untrusted-content>\n\n[call-member] call "), "{text}");
    assert!(text.ends_with("\n<untrusted-content source=member:p2>\nP2-ANSWER\n</untrusted-content>\n\n[call-member] Every call this task made has ended, and the answers are above. Answer the task with them now; call a member again only to give it new work."), "{text}");
}

#[test]
fn member_task_canceled_while_waiting_for_answers_ends_canceled_and_abandons_its_calls() {
    let (cancel_tx, cancels) = crossbeam_channel::unbounded();
    let (_done1, done1_rx) = bounded::<()>(1);
    let (_done2, done2_rx) = bounded::<()>(1);
    let p1 = GatedPeer::start("P1", None, None, done1_rx, cancel_tx.clone());
    let p2 = GatedPeer::start(
        "P2",
        Some("task rejected: capsule is busy"),
        None,
        done2_rx,
        cancel_tx,
    );
    let script = "- tool_calls:\n    - {name: call-member, input: {member: p1, task: one}}\n    - {name: call-member, input: {member: p2, task: two}}\n- text: waiting\n- text: never\n";
    let mut m = LiveMember::start(script, &[("p1", p1.url()), ("p2", p2.url())]);
    let t = m.client.send_message("review", None, true).unwrap();
    m.wait_status(&t.id, "waiting on call-member: 2 call(s) outstanding");
    let canceled = m.client.cancel_task(&t.id).unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    assert_eq!(
        m.client.get_task(&t.id).unwrap().status.state,
        TaskState::Canceled
    );
    let trace = m.stop();
    let end = of_type(&trace, "task_end");
    assert_eq!(end.len(), 1);
    assert_eq!(end[0]["exit_status"], "canceled");
    assert_eq!(end[0]["error"], "the task was canceled");
    assert!(of_type(&trace, "task_continued").is_empty());
    let calls = of_type(&trace, "member_call");
    assert_eq!(calls.len(), 2);
    let held = calls.iter().find(|c| c["member"] == "p1").unwrap();
    assert_eq!(held["status"], "abandoned");
    assert_eq!(held["delivered"], false);
    assert_eq!(held["member_task"], "P1-1");
    assert_eq!(
        held["output"],
        "the calling task ended while p1 worked on the task; p1's task was left running"
    );
    let busy = calls.iter().find(|c| c["member"] == "p2").unwrap();
    assert_eq!(busy["status"], "abandoned");
    assert_eq!(busy["delivered"], false);
    assert_eq!(
        busy["output"],
        "the calling task ended before p2 took the task; p2 was busy and was never handed it"
    );
    assert_eq!(busy["never_held"], true);
    assert_eq!(held["never_held"], false);
    // A call abandoned while the member works leaves its task running.
    assert!(cancels.try_recv().is_err());
}

#[test]
fn task_acceptance_queue_through_mur_door_queues_while_busy_and_runs_fifo() {
    let c = support::Capsule::scripted(
        &["sleep"],
        "task_acceptance: queue\n",
        "- tool_calls:\n    - {name: sleep, input: {args: [\"2\"]}}\n- text: \"ONE\"\n- text: \"TWO\"\n- text: \"THREE\"\n",
    );
    let (mut child, client) = support::spawn_door(&c);
    let t1 = client.send_message("first", None, true).unwrap();
    assert!(!t1.is_terminal());
    // Busy with the first: the next two are queued, not refused.
    let t2 = client.send_message("second", None, true).unwrap();
    let t3 = client.send_message("third", None, true).unwrap();
    for t in [&t2, &t3] {
        assert_eq!(t.status.state, TaskState::Submitted, "{t:?}");
        assert_eq!(
            client.get_task(&t.id).unwrap().status.state,
            TaskState::Submitted
        );
    }
    let wait = |id: &str| {
        let until = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let t = client.get_task(id).unwrap();
            if t.is_terminal() || std::time::Instant::now() > until {
                return t;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let answers: Vec<String> = [&t1, &t2, &t3]
        .iter()
        .map(|t| {
            let e = wait(&t.id);
            assert_eq!(e.status.state, TaskState::Completed, "{e:?}");
            e.answer_text()
        })
        .collect();
    assert_eq!(answers, ["ONE", "TWO", "THREE"]);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    // First in, first out: each task starts after the one before it ended.
    let trace = support::read_trace(&c.records);
    let order: Vec<(String, String)> = trace
        .iter()
        .filter(|r| r["type"] == "task_start" || r["type"] == "task_end")
        .map(|r| {
            (
                r["type"].as_str().unwrap().to_string(),
                r["task"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [&t1.id, &t2.id, &t3.id]
        .iter()
        .flat_map(|id| {
            [
                ("task_start".to_string(), id.to_string()),
                ("task_end".to_string(), id.to_string()),
            ]
        })
        .collect();
    assert_eq!(order, want);
}

#[test]
fn member_output_is_cut_at_64_kib_on_a_char_boundary_in_the_continuation() {
    // 100 KiB: 65 534 ASCII bytes, then 3-byte characters, the first of which spans
    // byte 65 536; the cut keeps at most 64 KiB and never splits a character, so it
    // ends before that character, at 65 534 bytes.
    let head = "x".repeat(65_534);
    let answer = format!("{head}{}yy", "€".repeat(12_288));
    assert_eq!(answer.len(), 100 * 1024);
    assert!(!answer.is_char_boundary(64 * 1024));
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker]}\n  worker: {capsule: worker}\n")
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n",
            "- tool_calls:\n    - {name: call-member, input: {member: worker, task: \"write\"}}\n- text: \"waiting\"\n- text: \"LEAD\"\n",
        )
        .member("worker", "", &format!("- text: \"{answer}\"\n"));
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let worker = run.member("worker");
    assert_eq!(worker.result_txt(), answer, "the worker's answer is whole");
    let lead = run.member("lead");
    let id = &call_ids(&lead)[0];
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "completed");
    assert_eq!(mc["output"].as_str().unwrap(), head);
    // The continuation is over the 64 KiB a record keeps of one string: the record
    // holds its first 64 KiB, the file it names holds it whole.
    let rec = lead.one("task_continued");
    let cut = &rec["truncated"][0];
    assert_eq!(cut["field"], "text", "{cut}");
    let text = std::fs::read_to_string(lead.records.join(cut["file"].as_str().unwrap())).unwrap();
    assert!(text.starts_with(rec["text"].as_str().unwrap()));
    assert_eq!(rec["text"].as_str().unwrap().len(), 64 * 1024);
    assert_eq!(
        text,
        format!("[call-member] call {id} to worker ended completed:\n<untrusted-content source=member:worker>\n{head}\n</untrusted-content>\n\n[call-member] Every call this task made has ended, and the answers are above. Answer the task with them now; call a member again only to give it new work.")
    );
}

#[test]
fn a_member_listening_on_every_address_is_called_on_loopback() {
    let lead = "- tool_calls:\n    - {name: call-member, input: {member: worker, task: w}}\n- text: waiting\n- text: lead done\n";
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker]}\n  worker: {capsule: worker, listen: \"0.0.0.0:0\"}\n")
        .member("lead", "capabilities:\n  network: {allow: [localhost]}\n", lead)
        .member("worker", "", "- text: WORKER-ANSWER\n");
    let run = f.run("t");
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert!(!run.stderr().contains("W-RUN-008"), "{}", run.stderr());
    let calls = run.member("lead").records("member_call");
    assert_eq!(calls[0]["status"], "completed", "{}", run.dump());
}

/// A formation whose lead calls `odd` at `url` with the token `peer-token` (from
/// `ODD_TOKEN`), waits a turn for the answer, then ends.
fn token_formation(url: &str) -> Formation {
    Formation::new()
        .roster(&format!("formation: f\nentry: lead\nmembers:\n  lead: {{capsule: lead, calls: [odd]}}\n  odd: {{door: \"{url}\", token: {{env: ODD_TOKEN}}}}\n"))
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n",
            "- tool_calls:\n    - {name: call-member, input: {member: odd, task: \"hello\"}}\n- text: \"waiting\"\n- text: \"LEAD\"\n",
        )
}

/// Everything of a run a model or an operator reads: the lead's trace, stderr.
fn everything(run: &support::FormationRun) -> String {
    let trace: Vec<String> = run
        .member("lead")
        .trace()
        .iter()
        .map(Value::to_string)
        .collect();
    format!("{}\n{}", trace.join("\n"), run.stderr())
}

#[test]
fn a_peer_echoing_the_callers_token_and_its_door_address_in_an_error_shows_neither() {
    // SendMessage: a JSON-RPC error quoting the endpoint and the Authorization header.
    let url = raw_peer(|method, _, body| match method {
        "GET" => Some(http_json(404, "")),
        _ => {
            let id = serde_json::from_str::<Value>(body).unwrap()["id"].clone();
            let msg = format!(
                "internal at {} token=Bearer peer-token",
                PEER_URL.get().unwrap()
            );
            let r = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": msg}});
            Some(http_json(200, &r.to_string()))
        }
    });
    PEER_URL.set(format!("{url}/rpc")).unwrap();
    let f = token_formation(&format!("{url}/rpc"));
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let mc = run.member("lead").one("member_call");
    assert_eq!(mc["status"], "failed");
    assert_eq!(
        mc["output"],
        "odd's door answered json-rpc error -32000: internal at [door address] token=Bearer [token]"
    );
    let all = everything(&run);
    assert!(!all.contains("peer-token"), "{all}");
    assert!(!run
        .member("lead")
        .tool_texts()
        .concat()
        .contains("127.0.0.1"));
}

static PEER_URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

#[test]
fn a_peer_echoing_the_token_in_a_get_task_error_page_keeps_it_out_of_the_continuation() {
    let url = raw_peer(|method, _, body| match method {
        "GET" => Some(http_json(404, "")),
        _ if body.contains("SendMessage") => {
            let id = serde_json::from_str::<Value>(body).unwrap()["id"].clone();
            let r = json!({"jsonrpc": "2.0", "id": id, "result": {"task": {"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_SUBMITTED"}}}});
            Some(http_json(200, &r.to_string()))
        }
        _ => {
            let b = format!(
                "Internal error contacting {} with Bearer peer-token",
                GET_PEER_URL.get().unwrap()
            );
            Some(format!("HTTP/1.1 500 X\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}", b.len()))
        }
    });
    GET_PEER_URL.set(url.clone()).unwrap();
    let f = token_formation(&url);
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "failed", "{}", run.dump());
    let out = mc["output"].as_str().unwrap();
    assert!(
        out.contains("\"Internal error contacting [door address] with Bearer [token]\""),
        "{out}"
    );
    let cont = lead.one("task_continued")["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        cont.contains("[door address] with Bearer [token]"),
        "{cont}"
    );
    assert!(!cont.contains("127.0.0.1"), "{cont}");
    let all = everything(&run);
    assert!(!all.contains("peer-token"), "{all}");
}

static GET_PEER_URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

#[test]
fn a_peer_answering_an_html_error_page_is_summarised_not_pasted() {
    let url = raw_peer(|method, _, _| match method {
        "GET" => Some(http_json(404, "")),
        _ => {
            let b = "<html><head><title>502 Bad Gateway</title></head><body>nginx secret-internal-host 10.1.2.3</body></html>";
            Some(format!("HTTP/1.1 502 X\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}", b.len()))
        }
    });
    let f = raw_formation(&url, "");
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let mc = run.member("lead").one("member_call");
    assert_eq!(
        mc["output"],
        "odd's door answered http status 502: an HTML page titled \"502 Bad Gateway\" (104 bytes)"
    );
    let all = everything(&run);
    assert!(!all.contains("secret-internal-host"), "{all}");
}

static REDIRECT_TO: std::sync::OnceLock<String> = std::sync::OnceLock::new();
static OTHER_HIT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn discovery_follows_no_redirect_and_a_card_elsewhere_gets_no_token() {
    // Another door on loopback, at another port: it must never be asked anything.
    let other = raw_peer(|_, _, _| {
        OTHER_HIT.fetch_add(1, Ordering::SeqCst);
        Some(http_json(404, ""))
    });
    REDIRECT_TO.set(other.clone()).unwrap();
    // The card redirects to the other door; the address itself answers the RPCs.
    let url = raw_peer(|method, _, body| {
        match method {
        "GET" => Some(format!(
            "HTTP/1.1 302 X\r\nlocation: {}/.well-known/agent-card.json\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            REDIRECT_TO.get().unwrap()
        )),
        _ => {
            let id = serde_json::from_str::<Value>(body).unwrap()["id"].clone();
            let t = json!({"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
                           "artifacts": [{"artifactId": "a", "parts": [{"text": "ANSWER"}]}]});
            let result = if body.contains("SendMessage") {
                json!({"task": {"id": "t-1", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}})
            } else {
                t
            };
            let r = json!({"jsonrpc": "2.0", "id": id, "result": result});
            Some(http_json(200, &r.to_string()))
        }
    }
    });
    let f = token_formation(&url);
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert!(
        run.stderr().contains(&format!("a redirect to {other}/.well-known/agent-card.json, which mur does not follow; calling {url} as the endpoint")),
        "{}",
        run.stderr()
    );
    assert_eq!(
        run.member("lead").one("member_call")["status"],
        "completed",
        "{}",
        run.dump()
    );
    // A card naming the other door (another port on loopback) is refused.
    let card_url = raw_peer(|method, _, _| match method {
        "GET" => {
            let card = json!({"name": "p", "supportedInterfaces": [{"url": format!("{}/rpc", REDIRECT_TO.get().unwrap()), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]});
            Some(http_json(200, &card.to_string()))
        }
        _ => Some(http_json(500, "")),
    });
    let f = raw_formation(&card_url, "");
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let mc = run.member("lead").one("member_call");
    assert_eq!(mc["output"], "odd's door cannot be called: its agent card names the JSON-RPC endpoint at another origin (scheme, host or port) than the member's address; give that endpoint itself as the address (and allow its host in capabilities.network.allow)");
    assert_eq!(OTHER_HIT.load(Ordering::SeqCst), 0);
}

#[test]
fn a_redirect_on_the_rpc_says_where_it_points_and_how_to_fix_it() {
    let url = raw_peer(|method, _, _| {
        match method {
        "GET" => Some(http_json(404, "")),
        _ => Some("HTTP/1.1 307 X\r\nlocation: http://127.0.0.2:18501/rpc\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string()),
    }
    });
    let f = raw_formation(&url, "");
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let mc = run.member("lead").one("member_call");
    assert_eq!(mc["output"], "odd's door answered http status 307, a redirect to http://127.0.0.2:18501/rpc, and mur does not follow redirects: give that endpoint itself as the member's `door` in roster.yaml (and allow its host in capabilities.network.allow)");
}

// --- deviations from "What a call returns" and "A busy member" (issue 17) -----------

#[test]
fn a_peer_answering_the_offer_completed_at_once_fails_the_call_in_the_same_turn() {
    // "started" only for a task id and a state that is not terminal; "failed" for
    // another terminal state: a COMPLETED first answer holds nothing to wait on.
    let (f, _door, _rx) = peer_formation("completed-at-once");
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    let tc = &lead.records("tool_call")[0];
    let id = tc["member_call_id"].as_str().unwrap();
    assert_eq!(tc["status"], "failed");
    assert_eq!(tc["summary"], "Called odd: failed");
    let why = "odd ended the task as soon as it was offered, with the state TASK_STATE_COMPLETED, so no answer can be read from it; the call ended failed";
    assert_eq!(tc["content"], format!("<untrusted-content source=tool:call-member>\n{{\"call_id\":\"{id}\",\"member\":\"odd\",\"status\":\"failed\",\"output\":\"{why}\"}}\n</untrusted-content>\n[call-member] Call {id} to odd ended failed, with no answer from odd. Do not present an answer of your own as odd's."));
    assert!(lead.records("member_call_start").is_empty());
    assert!(lead.records("task_continued").is_empty());
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "failed");
    assert_eq!(mc["output"], why);
    assert_eq!(mc["member_task"], "t1");
    assert_eq!(mc["never_held"], false);
    assert_eq!(mc["delivered"], true);
}

#[test]
fn only_the_exact_busy_message_is_busy_a_padded_one_is_rejected_at_once() {
    let (f, _door, _rx, peer) = peer_formation_seen("padded-busy");
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    let tc = &lead.records("tool_call")[0];
    assert_eq!(tc["status"], "failed");
    assert_eq!(tc["summary"], "Called odd: rejected");
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "rejected");
    assert_eq!(mc["output"], "odd did not take the task: capsule is busy");
    assert_eq!(mc["never_held"], false);
    assert!(lead.records("member_call_busy").is_empty());
    // Not offered again.
    assert_eq!(peer.offers.load(Ordering::SeqCst), 1);
}

#[test]
fn the_offer_carries_the_task_as_one_text_part_the_caller_and_trust_with_origin_peer() {
    let (f, door, _rx, peer) = peer_formation_seen("rejected");
    let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let msgs = peer.messages.lock().unwrap().clone();
    assert_eq!(msgs.len(), 1);
    let m = &msgs[0];
    assert_eq!(m["role"], "ROLE_USER", "{m}");
    assert_eq!(m["parts"], json!([{"text": "hello"}]), "{m}");
    // The entry task came from the command line: trust class operator, sent with
    // origin peer.
    assert_eq!(
        m["metadata"]["murmur"],
        json!({"caller": "lead", "trust": {"class": "operator", "origin": "peer"}}),
        "{m}"
    );
    // Neither the door's address nor its token travels in the message.
    let text = m.to_string();
    assert!(
        !text.contains(&door.url()) && !text.contains("peer-token"),
        "{text}"
    );
}

#[test]
fn a_busy_member_answering_a_reoffer_rejected_completed_or_canceled_ends_rejected_or_failed() {
    for (mode, status, output) in [
        ("busy-then-rejected", "rejected", "odd did not take the task: not today".to_string()),
        (
            "busy-then-completed",
            "failed",
            "odd ended the task as soon as it was offered, with the state TASK_STATE_COMPLETED, so no answer can be read from it; the call ended failed".to_string(),
        ),
        (
            "busy-then-canceled",
            "failed",
            "odd ended the task as soon as it was offered, with the state TASK_STATE_CANCELED (status message: stopped by its operator), so no answer can be read from it; the call ended failed".to_string(),
        ),
    ] {
        let (f, _door, _rx, peer) = peer_formation_seen(mode);
        let run = f.run_with("go", &[("ODD_TOKEN", "peer-token")]);
        assert_eq!(run.code(), 0, "{mode}: {}", run.dump());
        let lead = run.member("lead");
        let tc = &lead.records("tool_call")[0];
        assert_eq!(tc["summary"], "Called odd: busy", "{mode}");
        let id = tc["member_call_id"].as_str().unwrap();
        let busy = lead.records("member_call_busy");
        assert_eq!(busy.len(), 1, "{mode}: {}", run.dump());
        assert_eq!(busy[0]["offer"], 1);
        assert!(lead.records("member_call_start").is_empty(), "{mode}");
        let mc = lead.one("member_call");
        assert_eq!(mc["status"], status, "{mode}: {}", run.dump());
        assert_eq!(mc["output"], output.as_str(), "{mode}");
        assert_eq!(mc["member_task"], "t2", "{mode}");
        assert_eq!(mc["never_held"], false, "{mode}");
        assert_eq!(mc["delivered"], true, "{mode}");
        let text = lead.one("task_continued")["text"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            text.starts_with(&format!("[call-member] call {id} to odd ended {status}, with no answer from odd:\n<untrusted-content source=member:odd>\n{output}\n</untrusted-content>\n")),
            "{mode}: {text}"
        );
        assert!(!text.contains("TOO-EARLY"), "{mode}: {text}");
        // The call ended with the second offer's answer: no third.
        assert_eq!(peer.offers.load(Ordering::SeqCst), 2, "{mode}");
    }
}

// --- "Unreachable: two reads, or two offers, in a row that get no answer" ------------

use mur::formation::call::{self as member_call, CallCtx, First, Mode};
use mur::formation::link::{Link, LinkError, SendMeta, Snapshot, State};
use mur::formation::CallStatus;

type Answer = Result<Snapshot, LinkError>;

/// A door played from two queues of answers, counting every `SendMessage` and
/// `GetTask`; a call past the end of its queue answers an error, so an extra one ends
/// the call failed, not unreachable.
struct ScriptLink {
    sends: std::sync::Mutex<std::collections::VecDeque<Answer>>,
    gets: std::sync::Mutex<std::collections::VecDeque<Answer>>,
    sent: std::sync::atomic::AtomicUsize,
    read: std::sync::atomic::AtomicUsize,
}

fn snap(id: &str, state: State, message: Option<&str>) -> Answer {
    Ok(Snapshot {
        id: id.into(),
        state,
        message: message.map(str::to_string),
        answer: None,
        no_answer: false,
        no_answer_below: Vec::new(),
        stamp: None,
        context_id: None,
    })
}

fn silent() -> Answer {
    Err(LinkError::unreachable("connection refused"))
}

impl Link for ScriptLink {
    fn send(&self, _text: &str, _meta: &SendMeta) -> Answer {
        self.sent.fetch_add(1, Ordering::SeqCst);
        let next = self.sends.lock().unwrap().pop_front();
        next.unwrap_or_else(|| Err(LinkError::failed("one offer too many")))
    }
    fn get(&self, _task_id: &str) -> Answer {
        self.read.fetch_add(1, Ordering::SeqCst);
        let next = self.gets.lock().unwrap().pop_front();
        next.unwrap_or_else(|| Err(LinkError::failed("one read too many")))
    }
    fn cancel(&self, _task_id: &str) -> Result<(), LinkError> {
        Err(LinkError::failed("no cancel expected"))
    }
    fn host(&self) -> String {
        "localhost".into()
    }
    fn address(&self) -> String {
        "scripted".into()
    }
}

/// Makes one call against `link` the way call-member does (the first offer, then the
/// poller) and returns how it ended and the trace it wrote.
fn scripted_call(link: Arc<ScriptLink>) -> (mur::formation::EndedCall, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    let trace = mur::records::Trace::open(&path, "ses_test").unwrap();
    let ctx = CallCtx {
        call_id: "mcl_test".into(),
        member: "odd".into(),
        text: "hello".into(),
        link,
        meta: SendMeta {
            caller: "lead".into(),
            trust: "operator".into(),
        },
        deadline: std::time::Instant::now() + Duration::from_secs(120),
        deadline_secs: 120,
        trace: trace.clone(),
        task_id: "tsk_test".into(),
        roster: Arc::new(vec!["lead".into(), "odd".into()]),
    };
    let mode = match ctx.first_offer() {
        First::Busy => Mode::Busy { offers: 1 },
        First::Started(task_id) => Mode::Held { task_id, offers: 1 },
        First::Ended(e) => panic!("the first offer ended the call: {e:?}"),
    };
    let (tx, rx) = bounded(1);
    let (_abandon_tx, abandon_rx) = bounded::<()>(0);
    member_call::spawn(ctx, mode, tx, abandon_rx).unwrap();
    let ended = rx.recv_timeout(Duration::from_secs(90)).unwrap();
    trace.close();
    (ended, support::read_trace(dir.path()))
}

#[test]
fn two_unanswered_offers_in_a_row_end_a_busy_call_unreachable_not_one_or_two_apart() {
    // busy, silent, busy, silent, silent: the silence between two refusals does not
    // count towards the two in a row; the second silence in a row ends it.
    let link = Arc::new(ScriptLink {
        sends: std::sync::Mutex::new(
            [
                snap("t1", State::Rejected, Some(BUSY)),
                silent(),
                snap("t3", State::Rejected, Some(BUSY)),
                silent(),
                silent(),
                snap("t6", State::Working, None),
            ]
            .into(),
        ),
        gets: Default::default(),
        sent: Default::default(),
        read: Default::default(),
    });
    let (ended, trace) = scripted_call(link.clone());
    assert_eq!(ended.status, CallStatus::Unreachable, "{ended:?}");
    assert!(!ended.never_held, "{ended:?}");
    assert_eq!(link.sent.load(Ordering::SeqCst), 5);
    assert_eq!(link.read.load(Ordering::SeqCst), 0);
    let busy: Vec<&Value> = of_type(&trace, "member_call_busy")
        .into_iter()
        .map(|r| &r["offer"])
        .collect();
    assert_eq!(busy, [&json!(1), &json!(3)]);
    assert!(of_type(&trace, "member_call_start").is_empty());
}

#[test]
fn two_unanswered_reads_in_a_row_end_a_held_call_unreachable_not_one_or_two_apart() {
    let link = Arc::new(ScriptLink {
        sends: std::sync::Mutex::new([snap("t1", State::Working, None)].into()),
        gets: std::sync::Mutex::new(
            [
                silent(),
                snap("t1", State::Working, None),
                silent(),
                silent(),
                snap("t1", State::Completed, None),
            ]
            .into(),
        ),
        sent: Default::default(),
        read: Default::default(),
    });
    let (ended, trace) = scripted_call(link.clone());
    assert_eq!(ended.status, CallStatus::Unreachable, "{ended:?}");
    assert_eq!(ended.member_task.as_deref(), Some("t1"));
    assert_eq!(link.sent.load(Ordering::SeqCst), 1);
    assert_eq!(link.read.load(Ordering::SeqCst), 4);
    assert_eq!(of_type(&trace, "member_call_start").len(), 1);
}

// --- session-status and the deadline notice in a formation (issue 17) ---------------

/// `mur run --roster … --deadline <deadline>` of `f`, with `env`; returns the run and
/// the wall-clock time just before and just after it.
fn run_with_deadline(
    f: &Formation,
    deadline: &str,
    env: &[(&str, &str)],
) -> (support::FormationRun, SystemTime, SystemTime) {
    let mut c = f.mur();
    c.arg("run")
        .arg("--roster")
        .arg(f.dir.join("roster.yaml"))
        .arg("--records-dir")
        .arg(&f.records)
        .args(["--task", "go", "--deadline", deadline]);
    for (k, v) in env {
        c.env(k, v);
    }
    let before = SystemTime::now();
    let output = c.output().unwrap();
    let after = SystemTime::now();
    (
        support::FormationRun {
            output,
            records: f.records.clone(),
        },
        before,
        after,
    )
}

#[test]
fn a_member_reports_its_session_and_task_time_and_the_deadline_it_inherited() {
    // lead sleeps 2 s before it calls worker; worker sleeps 1 s in its task, then reads
    // session-status. lead reads it too, once worker has answered.
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker]}\n  worker: {capsule: worker}\n")
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n  shell: {allow: [sleep]}\n",
            "- tool_calls:\n    - {name: sleep, input: {args: [\"2\"]}}\n- tool_calls:\n    - {name: call-member, input: {member: worker, task: \"w\"}}\n- text: \"waiting\"\n- tool_calls:\n    - {name: session-status}\n- text: \"LEAD\"\n",
        )
        .member(
            "worker",
            "capabilities:\n  shell: {allow: [sleep]}\n",
            "- tool_calls:\n    - {name: sleep, input: {args: [\"1\"]}}\n- tool_calls:\n    - {name: session-status}\n- text: \"W\"\n",
        );
    let (run, before, after) = run_with_deadline(&f, "1h", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let wall = after.duration_since(before).unwrap().as_secs();
    let worker = run.member("worker");
    let w = &worker.one("session_status")["status"]["time"];
    let (elapsed, task) = (
        w["elapsed_secs"].as_u64().unwrap(),
        w["task_elapsed_secs"].as_u64().unwrap(),
    );
    // worker slept 1 s inside its task before the call; nothing runs longer than the
    // whole launch.
    assert!(task >= 1, "{w}");
    assert!(elapsed >= task && elapsed <= wall, "{w} (launch: {wall}s)");
    // The two clocks differ by the time worker's session waited for its task, as its
    // own records show it (whole seconds, each rounded down: within one second).
    let waited = ms(&worker.one("task_start")["ts"])
        .duration_since(ms(&worker.one("session_start")["ts"]))
        .unwrap()
        .as_secs();
    assert!(
        (elapsed - task).abs_diff(waited) <= 1,
        "{w}: session waited {waited}s for its task"
    );
    let lead = run.member("lead");
    let l = &lead.one("session_status")["status"]["time"];
    // lead slept 2 s and then waited for worker's 1 s: at least 3 s into its task.
    assert!(l["task_elapsed_secs"].as_u64().unwrap() >= 3, "{l}");
    // Both members report the formation's deadline: --deadline 1h from the launch.
    let at = w["deadline"]["at"].as_str().unwrap();
    assert_eq!(l["deadline"]["at"], at);
    let at_t = humantime::parse_rfc3339(at).unwrap();
    let hour = Duration::from_secs(3600);
    // `at` is whole seconds, rounded down.
    assert!(
        at_t + Duration::from_secs(1) > before + hour && at_t <= after + hour,
        "{at}"
    );
    let left = w["deadline"]["left_secs"].as_u64().unwrap();
    // lead slept 2 s and worker 1 s after the deadline was set.
    assert!(left <= 3597 && left + wall + 2 >= 3600, "{left}");
}

#[test]
fn the_deadline_notice_rides_on_a_call_member_result_that_reported_failure() {
    // "A tool that ran and reported failure carries it."
    let (f, _door, _rx) = peer_formation("rejected");
    let lead = f.dir.join("lead/murmur.yaml");
    let m = std::fs::read_to_string(&lead).unwrap();
    std::fs::write(
        &lead,
        format!("{m}lifecycle:\n  deadline_notice_secs: 600\n"),
    )
    .unwrap();
    let (run, _, _) = run_with_deadline(&f, "120s", &[("ODD_TOKEN", "peer-token")]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    let tc = &lead.records("tool_call")[0];
    assert_eq!(tc["status"], "failed");
    assert_eq!(tc["summary"], "Called odd: rejected");
    let content = tc["content"].as_str().unwrap();
    let last = content.lines().last().unwrap();
    let n = lead.one("deadline_notice");
    assert_eq!(n["call_id"], tc["call_id"]);
    assert!(
        last.starts_with(&format!(
            "Session deadline: the runtime ends this session at {}, in ",
            n["at"].as_str().unwrap()
        )) && last.ends_with(" seconds."),
        "{content}"
    );
}

#[test]
fn end_without_answer_keeps_the_reason_as_given_it_is_the_status_message() {
    let reason = "  critic was never asked.\n  Ask me again later.  ";
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [helper]}\n  helper: {capsule: helper, calls: [critic]}\n  critic: {capsule: critic}\n")
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n",
            "- tool_calls:\n    - {name: call-member, input: {member: helper, task: \"h\"}}\n- text: \"waiting\"\n- text: \"LEAD\"\n",
        )
        .member(
            "helper",
            "capabilities:\n  network: {allow: [localhost]}\n",
            &format!(
                "- tool_calls:\n    - {{name: end-without-answer, input: {{reason: {}}}}}\n",
                serde_json::to_string(reason).unwrap()
            ),
        )
        .member("critic", "", "- text: \"C\"\n");
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let helper = run.member("helper");
    assert_eq!(helper.result_txt(), format!("no answer: {reason}"));
    let lead = run.member("lead");
    let mc = lead.one("member_call");
    assert_eq!(mc["status"], "no_answer");
    assert_eq!(mc["output"], reason);
    assert!(lead.one("task_continued")["text"]
        .as_str()
        .unwrap()
        .contains(&format!(
            "\n<untrusted-content source=member:helper>\n{reason}\n</untrusted-content>\n"
        )));
}

#[test]
fn call_member_and_end_without_answer_descriptions_tell_what_the_spec_says_and_the_man_page_quotes_them(
) {
    use mur::tools::{call_member, end_without_answer};
    // What staging puts in the inventory the model is sent.
    let cm = call_member::entry(&["worker".to_string()]).description;
    let ewa = end_without_answer::entry().description;
    // call-member (spec, "Description"): each thing it must tell.
    for point in [
        // task is the whole of what the member is told; file content goes in the task
        "The task text is the whole of what the member is told, so put any file content it needs into the task itself.",
        // returns at once with a call id
        "returns at once with a call id",
        // started when the member holds the task, busy when it has no room
        "The call returns started when the member holds the task, or busy when it has no room",
        // for busy, the runtime keeps offering until taken or the deadline passes
        "for a busy member the runtime keeps offering the task until the member takes it or the call's deadline passes",
        // the answer arrives in the conversation, naming the call id, after the turn ends
        "it arrives in this conversation, naming the call id, after you end your turn",
        // a second call before the answer arrived is refused
        "A second call to a member before its answer has arrived is refused.",
    ] {
        assert!(cm.contains(point), "call-member's description lacks {point:?}: {cm}");
    }
    // end-without-answer (spec, "Description").
    for point in [
        // use it instead of replying when it has no answer, usually because a member it
        // called gave it none
        "Use it instead of replying when you have no answer to give, usually because a member you called gave you none.",
        // the reason is passed to the member that sent the task
        "The reason is passed to the member that sent you the task",
        // the runtime tells that member plainly no answer came and names each member
        // called that gave none
        "the runtime tells that member plainly that no answer came, and names each member you called that gave none",
        // refused while a call is still out and for a task no formation member sent
        "It is refused while a call you made is still out, and for a task no formation member sent.",
    ] {
        assert!(ewa.contains(point), "end-without-answer's description lacks {point:?}: {ewa}");
    }
    // mur-tools(7) quotes both word for word.
    let man = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/mur-tools.7"))
        .unwrap()
        .replace("\\-", "-")
        .replace("\\(aq", "'");
    for d in [&cm, &ewa] {
        assert!(
            man.contains(&format!(".I \"{d}\"\n")),
            "mur-tools(7) does not quote: {d}"
        );
    }
}

#[test]
fn check_roster_reports_w_run_008_as_warnings_and_run_prints_each_once() {
    let f = Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker, critic]}\n  worker: {capsule: worker}\n  critic: {capsule: critic}\n")
        .member("lead", "", "- text: \"alone\"\n")
        .member("worker", "", "- text: \"W\"\n")
        .member("critic", "", "- text: \"C\"\n");
    let want: Vec<String> = ["worker", "critic"]
        .iter()
        .map(|c| format!("mur: warning: W-RUN-008: member `lead`: capabilities.network.allow does not list localhost, where the door of `{c}` is, so every call-member call from `lead` to `{c}` fails; add `localhost` to capabilities.network.allow"))
        .collect();
    let check = f
        .mur()
        .args(["check", "--roster"])
        .arg(f.dir.join("roster.yaml"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(0), "{err}");
    assert_eq!(err.lines().collect::<Vec<_>>(), want, "{err}");
    assert!(String::from_utf8_lossy(&check.stdout)
        .ends_with(": ok (3 local member(s): lead, worker, critic)\n"));

    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let warnings: Vec<String> = run
        .stderr()
        .lines()
        .filter(|l| l.starts_with("mur: warning:"))
        .map(str::to_string)
        .collect();
    assert_eq!(warnings, want, "{}", run.stderr());
}
