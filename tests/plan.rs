//! submit-plan end to end with the real binary: the grant is the tool's existence,
//! the plan guidance in the system prompt, steps through the decision point, the
//! refusals, the records, and the offline example.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{json, Value};
use support::Capsule;

const PLAN: &str = "capabilities:\n  shell:\n    allow: [sh]\n  plan:\n    submit: true\n";

/// A capsule with shell `sh` and submit-plan, `extra` appended, playing `script`.
fn planner(extra: &str, script: &str) -> Capsule {
    let m = format!(
        "name: test\nworkdir: work\ninference:\n  driver: s\n  choices:\n    s: {{driver: script, script: replies.yaml}}\n{PLAN}{extra}"
    );
    Capsule::new().manifest(&m).file("replies.yaml", script)
}

/// The data inside the fence of a tool text.
fn data(text: &str) -> String {
    let body = text.split_once(">\n").unwrap().1;
    body.rsplit_once("\n</untrusted-content>")
        .unwrap()
        .0
        .to_string()
}

/// The plan's result (the last tool_call record, the one the model made) as JSON.
fn plan_result(run: &support::Run) -> (Value, Value) {
    let calls = run.records("tool_call");
    let outer = calls
        .iter()
        .rfind(|c| c["name"] == "submit-plan")
        .unwrap()
        .clone();
    let v: Value = serde_json::from_str(&data(outer["content"].as_str().unwrap())).unwrap();
    (outer, v)
}

#[test]
fn the_tool_and_its_guidance_exist_exactly_with_the_grant() {
    let with = planner("", "- text: hi\n");
    let run = with.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(
        run.one("session_start")["tools_declared"],
        json!(["sh", "session-status", "submit-plan"])
    );
    let without = Capsule::scripted(
        &["sh"],
        "",
        "- tool_calls: [{name: submit-plan, input: {steps: [{tool: sh, input: {args: [-c, 'echo x']}}]}}]\n- text: hi\n",
    );
    let run = without.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(
        run.one("session_start")["tools_declared"],
        json!(["sh", "session-status"])
    );
    assert!(run.tool_texts()[0].contains("tool `submit-plan` does not exist in this session: it exists only when the capsule declares capabilities.plan.submit"), "{}", run.tool_texts()[0]);
    // The system prompt carries the guidance exactly when the tool exists.
    let prompt = |c: &Capsule| {
        let loaded = mur::staging::load_capsule(&c.dir, &[]).unwrap();
        mur::staging::system_prompt(&loaded.dir, &loaded.manifest).unwrap()
    };
    assert_eq!(
        prompt(&with),
        format!(
            "{}\n\n{}",
            mur::staging::DEFAULT_SYSTEM_PROMPT,
            mur::staging::PLAN_GUIDANCE
        )
    );
    assert_eq!(prompt(&without), mur::staging::DEFAULT_SYSTEM_PROMPT);
    // The staged manifest's schema lists the tools a step may name.
    let out = with.mur().arg("stage").arg(&with.dir).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let runtime = text
        .lines()
        .find_map(|l| l.strip_prefix("runtime directory: "))
        .unwrap();
    let m: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(Path::new(runtime).join("tools/submit-plan/murmur.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        m["input_schema"]["properties"]["steps"]["items"]["properties"]["tool"]["enum"],
        json!(["sh", "session-status"])
    );
    assert_eq!(m["input_schema"]["properties"]["steps"]["maxItems"], 16);
}

#[test]
fn steps_run_in_order_through_the_decision_point_and_every_result_returns() {
    let script = r#"
- tool_calls:
    - name: submit-plan
      input:
        steps:
          - {tool: sh, input: {args: ["-c", "echo one > a.txt; echo first"]}}
          - {tool: sh, input: {args: ["-c", "cat a.txt; echo second"]}}
          - {tool: session-status}
- text: done
"#;
    let c = planner(
        "hooks:\n  on_tool_call:\n    - {command: [hooks/h]}\n",
        script,
    );
    let hook = c.dir.join("hooks/h");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(
        &hook,
        "#!/bin/sh\ncat >> \"$0.seen\"; echo >> \"$0.seen\"; echo '{\"decision\": \"allow\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.stdout(), "done\n");
    let (outer, v) = plan_result(&run);
    assert_eq!(outer["status"], "passed");
    let plan = v["plan"].as_str().unwrap();
    assert!(plan.starts_with("pln_"), "{plan}");
    assert_eq!(outer["plan"], plan);
    assert_eq!(
        outer["summary"],
        format!("plan {plan}: 3 of 3 step(s) passed")
    );
    assert_eq!(v["on_failure"], "stop");
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[0]["status"], "passed");
    assert!(steps[0]["output"].as_str().unwrap().contains("first"));
    // Step 1 ran after step 0: it read the file step 0 wrote.
    assert!(
        steps[1]["output"].as_str().unwrap().contains("one\nsecond"),
        "{}",
        steps[1]
    );
    assert_eq!(steps[2]["tool"], "session-status");
    assert!(steps[2]["output"].as_str().unwrap().contains("\"turns\""));
    // One tool_call per step, marked with the plan, then the plan's own.
    let calls = run.records("tool_call");
    assert_eq!(calls.len(), 4);
    for (i, s) in calls[..3].iter().enumerate() {
        assert_eq!(s["plan"], plan);
        assert_eq!(s["step"], i);
        assert_eq!(s["origin"], "plan_step");
        assert_eq!(s["call_id"], format!("{plan}.{i}"));
    }
    assert_eq!(calls[3]["name"], "submit-plan");
    // Every step passed the decision point with origin plan_step; so did the plan.
    let pd = run.records("policy_decision");
    assert_eq!(pd.len(), 4);
    assert_eq!(pd[0]["tool"], "submit-plan");
    assert_eq!(pd[0]["origin"], json!({"kind": "model"}));
    for (i, d) in pd[1..].iter().enumerate() {
        assert_eq!(
            d["origin"],
            json!({"kind": "plan_step", "plan": plan, "step": i})
        );
        assert_eq!(d["call_id"], format!("{plan}.{i}"));
    }
    let seen = std::fs::read_to_string(c.dir.join("hooks/h.seen")).unwrap();
    let seen: Vec<Value> = seen
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(seen[1]["origin"]["kind"], "plan_step");
    assert_eq!(seen[1]["tool"], "sh");
    // One plan record.
    let p = run.one("plan");
    assert_eq!(p["plan"], plan);
    assert_eq!(p["ran"], 3);
    assert_eq!(p["failed"], 0);
    assert_eq!(p["steps"][1]["call_id"], format!("{plan}.1"));
}

#[test]
fn a_step_denied_by_a_policy_hook_fails_and_stop_skips_the_rest() {
    // The hook denies every sh call whose first argument is "rm" (never the plan).
    let hook = "#!/bin/sh\nin=$(cat)\ncase \"$in\" in *'\"tool\":\"submit-plan\"'*) echo '{\"decision\": \"allow\"}';; *'\"args\":[\"rm'*) echo '{\"decision\": \"deny\", \"reason\": \"no rm\"}';; *) echo '{\"decision\": \"allow\"}';; esac\n";
    let script = r#"
- tool_calls:
    - name: submit-plan
      input:
        steps:
          - {tool: sh, input: {args: ["-c", "echo ok"]}}
          - {tool: sh, input: {args: ["rm", "-rf", "x"]}}
          - {tool: sh, input: {args: ["-c", "touch ran-after-deny"]}}
    - name: submit-plan
      input:
        on_failure: continue
        steps:
          - {tool: sh, input: {args: ["rm", "x"]}}
          - {tool: sh, input: {args: ["-c", "echo after"]}}
- text: done
"#;
    let c = planner(
        "hooks:\n  on_tool_call:\n    - {command: [hooks/h]}\n",
        script,
    );
    let p = c.dir.join("hooks/h");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, hook).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let outers: Vec<Value> = run
        .records("tool_call")
        .into_iter()
        .filter(|r| r["name"] == "submit-plan")
        .collect();
    assert_eq!(outers.len(), 2);
    let v: Value = serde_json::from_str(&data(outers[0]["content"].as_str().unwrap())).unwrap();
    let plan = v["plan"].as_str().unwrap();
    assert_eq!(outers[0]["status"], "failed");
    assert_eq!(
        outers[0]["summary"],
        format!("plan {plan}: step 1 failed; stopped, 1 step(s) skipped")
    );
    assert_eq!(v["steps"][0]["status"], "passed");
    assert_eq!(v["steps"][1]["status"], "refused");
    assert_eq!(
        v["steps"][1]["output"],
        "denied by hook on_tool_call[0] (h): no rm; the call did not run"
    );
    assert_eq!(
        v["steps"][2],
        json!({"step": 2, "tool": "sh", "status": "skipped"})
    );
    assert!(!c.dir.join("work/ran-after-deny").exists());
    // continue runs the rest.
    let v: Value = serde_json::from_str(&data(outers[1]["content"].as_str().unwrap())).unwrap();
    assert_eq!(v["on_failure"], "continue");
    assert_eq!(v["steps"][0]["status"], "refused");
    assert_eq!(v["steps"][1]["status"], "passed");
    assert!(v["steps"][1]["output"].as_str().unwrap().contains("after"));
    let plans = run.records("plan");
    assert_eq!(plans.len(), 2);
    assert_eq!(plans[0]["ran"], 2);
    assert_eq!(plans[0]["steps"][2]["status"], "skipped");
    assert_eq!(plans[1]["failed"], 1);
}

#[test]
fn refused_plans_run_nothing_and_write_no_plan_record() {
    let steps17: Vec<String> = (0..17)
        .map(|_| "{tool: session-status}".to_string())
        .collect();
    let script = format!(
        r#"
- tool_calls:
    - {{name: submit-plan, input: {{steps: []}}}}
    - {{name: submit-plan, input: {{steps: [{}]}}}}
    - {{name: submit-plan, input: {{steps: [{{tool: session-status}}, {{tool: nosuch, input: {{}}}}]}}}}
    - {{name: submit-plan, input: {{steps: [{{tool: session-status}}, {{tool: submit-plan, input: {{steps: []}}}}]}}}}
    - {{name: submit-plan, input: {{steps: [{{tool: end-without-answer, input: {{reason: x}}}}]}}}}
    - {{name: submit-plan, input: {{steps: [{{tool: sh, input: 3}}]}}}}
    - {{name: submit-plan, input: {{steps: [{{tool: sh}}], on_failure: retry}}}}
    - {{name: submit-plan, input: {{plan: []}}}}
    - {{name: submit-plan, input: {{}}}}
    - {{name: submit-plan, input: {{steps: [{{tool: sh, args: [ls]}}]}}}}
- text: done
"#,
        steps17.join(", ")
    );
    let c = planner("", &script);
    let run = c.run("t", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    let calls = run.records("tool_call");
    let form = "submit-plan takes {\"steps\": [{\"tool\": \"<tool>\", \"input\": {…}}, …], \"on_failure\": \"stop\" | \"continue\"}";
    let expected = [
        "a plan needs at least one step: `steps` is empty; give the calls to run, in order, as {\"tool\": \"<tool>\", \"input\": {…}}".to_string(),
        "a plan holds at most 16 steps; this one has 17: split it into plans of 16 or fewer, nothing was run".into(),
        "step 1: tool `nosuch` does not exist in this session: a shell binary is a tool only when capabilities.shell.allow lists it; the tools are: sh, session-status, submit-plan; nothing was run".into(),
        "step 1: `submit-plan` is not callable from a plan step (none of switch-driver, pull-artifact, remove-artifact, end-without-answer, submit-plan is); call it on its own, nothing was run".into(),
        "step 0: `end-without-answer` is not callable from a plan step (none of switch-driver, pull-artifact, remove-artifact, end-without-answer, submit-plan is); call it on its own, nothing was run".into(),
        "step 0: `input` must be an object (the tool's input), got a number".into(),
        "`on_failure` must be \"stop\" or \"continue\", got `\"retry\"`".into(),
        format!("unknown input key `plan`; {form}"),
        format!("`steps` is missing; {form}"),
        "step 0: unknown key `args`; a step is {\"tool\": \"<tool>\", \"input\": {…}}".into(),
    ];
    assert_eq!(calls.len(), expected.len(), "{}", run.dump());
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(data(calls[i]["content"].as_str().unwrap()), *e, "call {i}");
        assert_eq!(calls[i]["status"], "failed");
    }
    assert!(run.records("plan").is_empty());
    assert!(run.records("session_status").is_empty(), "a step ran");
}

#[test]
fn plan_example_runs_offline() {
    let c = Capsule::new();
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/plan");
    let run = c.run_at(Path::new(example), "Look at the project", &[]);
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(
        run.stdout(),
        "The project has a README and a src directory; nothing was changed.\n"
    );
    let p = run.one("plan");
    assert_eq!(p["ran"], 3);
    assert_eq!(p["failed"], 0);
}

#[test]
fn the_deadline_cutting_a_step_skips_the_steps_not_begun() {
    let script = r#"
- tool_calls:
    - name: submit-plan
      input:
        on_failure: continue
        steps:
          - {tool: sh, input: {args: ["-c", "sleep 30"]}}
          - {tool: sh, input: {args: ["-c", "touch ran-after-deadline"]}}
- text: done
"#;
    let c = planner("", script);
    let run = c.run("t", &["--deadline", "2s"]);
    assert_eq!(
        run.one("task_end")["exit_status"],
        "deadline",
        "{}",
        run.dump()
    );
    assert!(!c.dir.join("work/ran-after-deadline").exists());
    let p = run.one("plan");
    assert_eq!(p["ran"], 1);
    assert_eq!(p["canceled"], true);
    assert_eq!(p["steps"][1]["status"], "skipped");
    // Only the step that began has a tool_call of its own.
    let steps: Vec<Value> = run
        .records("tool_call")
        .into_iter()
        .filter(|r| r["origin"] == "plan_step")
        .collect();
    assert_eq!(steps.len(), 1);
}

#[test]
fn a_call_member_step_is_outstanding_work_answered_in_the_continuation() {
    let f = support::Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker]}\n  worker: {capsule: worker}\n")
        .member(
            "lead",
            "capabilities:\n  network: {allow: [localhost]}\n  plan: {submit: true}\n",
            r#"
- tool_calls:
    - name: submit-plan
      input:
        steps:
          - {tool: call-member, input: {member: worker, task: "Count the notes."}}
          - {tool: session-status}
- text: "Waiting for worker."
- text: "Worker says three."
"#,
        )
        .member("worker", "", "- text: three\n");
    let run = f.run("Ask the worker");
    assert_eq!(run.code(), 0, "{}", run.dump());
    assert_eq!(run.stdout(), "Worker says three.\n");
    let lead = run.member("lead");
    let p = lead.one("plan");
    assert_eq!(p["ran"], 2);
    assert_eq!(p["steps"][0]["tool"], "call-member");
    assert_eq!(p["steps"][0]["status"], "passed");
    let call = lead.one("member_call");
    assert_eq!(call["member"], "worker");
    assert_eq!(call["status"], "completed");
    assert_eq!(call["delivered"], true);
    let cont = lead.one("task_continued");
    assert_eq!(cont["answers"], 1);
    assert!(cont["text"].as_str().unwrap().contains("three"), "{cont}");
}
