//! The call-member and end-without-answer refusals no transport reaches: the session
//! answers a tool call only inside a running task (`task_start` is set before the
//! first inference), and end-without-answer is in the inventory only of a member with
//! a callee. These drive [`Loop`] directly with the state each refusal checks for.

use super::link::LocalLink;
use super::*;
use crate::staging;
use crate::tools::ToolResult;
use serde_json::json;

/// Runs `f` on a `Loop` between tasks (no task running) of a session whose member
/// role is `member`, staged from a script capsule in a temporary directory.
fn between_tasks(member: Option<MemberRole>, f: impl FnOnce(&mut Loop)) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("capsule");
    std::fs::create_dir_all(dir.join("work")).unwrap();
    std::fs::write(
        dir.join("murmur.yaml"),
        "name: helper\nworkdir: work\ninference:\n  driver: s\n  choices:\n    s: {driver: script, script: replies.yaml}\ncapabilities:\n  network: {allow: [localhost]}\n",
    )
    .unwrap();
    std::fs::write(dir.join("replies.yaml"), "- text: x\n").unwrap();
    let callees: Vec<String> = member
        .as_ref()
        .map(|m| m.callees.iter().map(|(n, _)| n.clone()).collect())
        .unwrap_or_default();
    let loaded = staging::load_capsule(&dir, &callees).unwrap();
    let staged = staging::stage_member(
        &root.path().join("home"),
        &loaded.dir,
        &loaded.text,
        &loaded.manifest,
        &callees,
    )
    .unwrap();
    let records = root.path().join("records");
    std::fs::create_dir_all(&records).unwrap();
    let spec = SessionSpec {
        manifest: loaded.manifest,
        staged,
        records_dir: records.clone(),
        deadline: None,
        choice: "s".into(),
        system_prompt: String::new(),
        member,
        peer_files: None,
    };
    let trace = Trace::open(&records.join("trace.jsonl"), &spec.staged.session_id).unwrap();
    let (board, _inbox) = Board::new(TaskAcceptance::Reject);
    let stop = crate::signals::ShutdownHandle::new();
    let mut lp = Loop {
        spec: &spec,
        trace,
        supervisor: Supervisor::for_session(&spec.staged.session_id),
        session_shutdown: stop.receiver(),
        shutdown: stop.receiver(),
        progress: Progress::none(),
        session_start: Instant::now(),
        task_start: None,
        task_id: String::new(),
        origin: Origin::CommandLine,
        deadline: None,
        counters: Counters::default(),
        logs_dir: records.join("logs"),
        phase: None,
        board: Arc::new(board),
        driver: None,
        calls: Calls::new(),
        completions: false,
        owners: HashMap::new(),
        hook_supervisor: Supervisor::for_session(&spec.staged.session_id),
        attempt: 1,
        reopens: 0,
    };
    f(&mut lp);
}

fn role(callees: &[&str]) -> MemberRole {
    let (board, _inbox) = Board::new(TaskAcceptance::Reject);
    let board = Arc::new(board);
    MemberRole {
        name: "helper".into(),
        callees: callees
            .iter()
            .map(|n| {
                let l: Arc<dyn Link> = Arc::new(LocalLink {
                    board: board.clone(),
                });
                (n.to_string(), l)
            })
            .collect(),
        roster: Arc::new(vec!["helper".into(), "worker".into()]),
        call_deadline: Duration::from_secs(600),
    }
}

/// Calls a tool the way dispatch does once the call passed the decision point.
fn run_tool(
    lp: &mut Loop,
    entry: crate::tools::ToolEntry,
    input: &serde_json::Value,
) -> ToolResult {
    entry.kind.tool().call(lp, &entry, input).result
}

fn call_member(lp: &mut Loop, input: &serde_json::Value) -> ToolResult {
    run_tool(
        lp,
        crate::tools::call_member::entry(&["worker".into()]),
        input,
    )
}

fn end_without_answer(lp: &mut Loop, input: &serde_json::Value) -> ToolResult {
    run_tool(lp, crate::tools::end_without_answer::entry(), input)
}

fn refusal(r: ToolResult) -> String {
    assert!(r.refused, "{r:?}");
    r.render("x")
        .strip_prefix("<untrusted-content source=tool:x>\n")
        .and_then(|s| s.strip_suffix("\n</untrusted-content>"))
        .unwrap()
        .to_string()
}

#[test]
fn call_member_made_while_no_task_is_running_is_refused() {
    between_tasks(Some(role(&["worker"])), |lp| {
        let r = call_member(lp, &json!({"member": "worker", "task": "hi"}));
        assert_eq!(
            refusal(r),
            "'call-member' is answered only while a task runs; this session is running none"
        );
        assert!(lp.calls.slots.is_empty(), "nothing was sent");
    });
}

#[test]
fn end_without_answer_in_a_session_that_is_no_member_with_a_callee_is_refused() {
    let want = "'end-without-answer' is answered only for a formation member that roster.yaml lets call another; this session is not one";
    between_tasks(None, |lp| {
        lp.task_start = Some(Instant::now());
        assert_eq!(
            refusal(end_without_answer(lp, &json!({"reason": "r"}))),
            want
        );
    });
    between_tasks(Some(role(&[])), |lp| {
        lp.task_start = Some(Instant::now());
        assert_eq!(
            refusal(end_without_answer(lp, &json!({"reason": "r"}))),
            want
        );
    });
}

#[test]
fn end_without_answer_while_no_task_is_running_is_refused() {
    between_tasks(Some(role(&["worker"])), |lp| {
        let r = end_without_answer(lp, &json!({"reason": "r"}));
        assert_eq!(
            refusal(r),
            "'end-without-answer' is answered only while a task runs; this session is running none"
        );
        assert!(lp.calls.ending.is_none());
    });
}
