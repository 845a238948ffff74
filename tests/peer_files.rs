//! share-file and fetch-peer-file end to end with the real binary: a formation
//! member's handle redeemed over its door, a handle minted behind `mur door` in
//! another process fetched by a formation, and the places with no door refusing the
//! grants (mur-tools(7), "Peer files").

use crate::support;

const LEAD_CAPS: &str = "exports:\n  peer_files: out\ncapabilities:\n  peer_fetch: true\n  network: {allow: [localhost]}\n";

fn contents(run: &support::Run) -> Vec<(String, String)> {
    run.records("tool_call")
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap_or("").to_string(),
                r["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn field(content: &str, key: &str) -> String {
    content
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} in {content}"))
        .to_string()
}

#[test]
fn a_member_shares_a_file_and_it_is_fetched_over_the_door_into_the_workdir() {
    let f = support::Formation::new()
        .roster("formation: f\nentry: lead\nmembers:\n  lead: {capsule: lead, calls: [worker]}\n  worker: {capsule: worker}\n")
        .member(
            "lead",
            LEAD_CAPS,
            "- tool_calls:\n    - {id: share, name: share-file, input: {path: report.txt}}\n- tool_calls:\n    - {id: fetch, name: fetch-peer-file, input: {handle: \"${result.share.handle}\", name: copy.txt}}\n- tool_calls:\n    - {id: again, name: fetch-peer-file, input: {handle: \"${result.share.handle}\", name: copy.txt}}\n    - {id: up, name: fetch-peer-file, input: {handle: \"${result.share.handle}\", name: \"../up.txt\"}}\n    - {id: esc, name: share-file, input: {path: \"../murmur.yaml\"}}\n    - {id: forged, name: fetch-peer-file, input: {handle: \"mph1.0000000000000000.lead.pf0000\"}}\n- text: done\n",
        )
        .member("worker", "", "- text: w\n");
    let lead_work = f.dir.join("lead/work");
    std::fs::create_dir_all(lead_work.join("out")).unwrap();
    std::fs::write(lead_work.join("out/report.txt"), "the report\n").unwrap();
    let run = f.run("go");
    assert_eq!(run.code(), 0, "{}", run.dump());
    let lead = run.member("lead");
    let c = contents(&lead);
    assert_eq!(c[0].0, "share-file");
    let handle = field(&c[0].1, "handle");
    assert!(
        handle.starts_with("mph1.") && !handle.contains("report"),
        "{handle}"
    );
    assert_eq!(field(&c[0].1, "size"), "11");
    assert!(c[1].1.contains("path: copy.txt\nsize: 11\n"), "{}", c[1].1);
    assert_eq!(
        std::fs::read_to_string(lead_work.join("copy.txt")).unwrap(),
        "the report\n"
    );
    assert!(
        c[2].1.contains("`copy.txt` exists in the workdir"),
        "{}",
        c[2].1
    );
    assert!(
        c[3].1.contains("cannot store the file as `../up.txt`"),
        "{}",
        c[3].1
    );
    assert!(c[4].1.contains("`..` is not allowed"), "{}", c[4].1);
    assert!(
        c[5].1.contains("it has 4 parts, a handle has 7"),
        "{}",
        c[5].1
    );
    assert!(!f.dir.join("lead/up.txt").exists());
    // Records: the handle id, never its secret; the snapshot in the records.
    let secret = handle.rsplit('.').next().unwrap().to_string();
    let shared = lead.one("peer_file_shared");
    assert!(!shared.to_string().contains(&secret));
    let id = shared["handle_id"].as_str().unwrap();
    assert_eq!(shared["size"], 11);
    assert_eq!(
        std::fs::read_to_string(run.records.join("lead/peer-files").join(id)).unwrap(),
        "the report\n"
    );
    let fetched = lead.records("peer_file_fetched");
    // The fetch, and the one refused because copy.txt existed (an `error`, no path).
    assert_eq!(fetched.len(), 2, "{fetched:?}");
    assert_eq!(fetched[0]["path"], "copy.txt");
    assert!(fetched[1]["error"]
        .as_str()
        .unwrap()
        .contains("exists in the workdir"));
    assert!(fetched[1].get("path").is_none());
    assert_eq!(fetched[0]["member"], "lead");
    assert!(!fetched[0].to_string().contains(&secret));
}

#[test]
fn a_handle_minted_behind_mur_door_is_fetched_by_a_formation_on_another_port() {
    let c = support::Capsule::scripted(
        &[],
        "exports:\n  peer_files: out\n",
        "- tool_calls:\n    - {id: share, name: share-file, input: {path: data.bin}}\n- text: shared\n",
    )
    .file("work/out/data.bin", &"0123456789".repeat(1000));
    let (mut child, client) = support::spawn_door(&c);
    let t = client.send_message("share it", None, false).unwrap();
    assert_eq!(t.status.state, mur::a2a::types::TaskState::Completed);
    // The trace writer is a thread of its own: the record may land just after the
    // task's state does, so wait for it (bounded) rather than read once.
    let started = std::time::Instant::now();
    let content = loop {
        let found = support::read_trace(&c.records)
            .into_iter()
            .find(|r| r["type"] == "tool_call" && r["name"] == "share-file")
            .and_then(|r| r["content"].as_str().map(str::to_string));
        if let Some(c) = found {
            break c;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "no share-file tool_call record"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let handle = field(&content, "handle");
    let url = client.url().to_string();

    let f = support::Formation::new()
        .roster(&format!("formation: f\nentry: lead\nmembers:\n  lead: {{capsule: lead, calls: [b]}}\n  b: {{door: \"{url}\", token: {{env: B_TOKEN}}}}\n"))
        .member(
            "lead",
            LEAD_CAPS,
            &format!("- tool_calls:\n    - {{id: fetch, name: fetch-peer-file, input: {{handle: \"{handle}\", name: data.bin}}}}\n- text: done\n"),
        );
    std::fs::create_dir_all(f.dir.join("lead/work/out")).unwrap();
    let run = f.run_with("go", &[("B_TOKEN", "door-token-for-tests")]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(run.code(), 0, "{}", run.dump());
    let got = run.member("lead").one("peer_file_fetched");
    assert_eq!(got["member"], "b", "{got}");
    assert_eq!(got["size"], 10000);
    assert_eq!(
        std::fs::read_to_string(f.dir.join("lead/work/data.bin")).unwrap(),
        "0123456789".repeat(1000)
    );
}

#[test]
fn mur_run_refuses_the_grants_it_cannot_serve() {
    for (extra, want) in [
        (
            "exports:\n  peer_files: out\n",
            "exports.peer_files grants share-file",
        ),
        (
            "capabilities:\n  peer_fetch: true\n",
            "capabilities.peer_fetch grants fetch-peer-file",
        ),
    ] {
        let c = support::Capsule::scripted(&[], extra, "- text: hi\n");
        std::fs::create_dir_all(c.dir.join("work/out")).unwrap();
        let r = c.run("t", &[]);
        assert_eq!(r.code(), 2, "{}", r.stderr());
        assert!(r.stderr().contains(want), "{}", r.stderr());
    }
}
