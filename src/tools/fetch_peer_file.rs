//! fetch-peer-file: redeems a handle a peer sent and stores the file in this
//! capsule's workdir (spec, "The twelve": `capabilities.peer_fetch`; mur-tools(7),
//! "Peer files").
//!
//! The bytes come over the issuing member's door (`GET /peer-files/<id>`, the
//! formation token and the handle's secret, in ranges), are checked against the
//! handle's size (the first byte past it stops the fetch) and sha256, and land
//! atomically under one plain name ([`super::peer_file::store_fetched`]). The model
//! never sees a door's address or token.

use std::time::Duration;

use serde_json::{json, Value};

use super::peer_file::{self, DoorReader, Handle};
use super::{ToolEntry, ToolKind, ToolResult};

/// The tool's name.
pub const NAME: &str = "fetch-peer-file";

/// How long one range request to a door may take: 30 seconds.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The inventory entry. Input: `{"handle": "…", "name": "…", "overwrite": false}`,
/// `handle` required.
pub fn entry() -> ToolEntry {
    ToolEntry {
        name: NAME.into(),
        description: "Stores in this capsule's workdir the file a formation member shared with share-file, given the handle it sent you. The runtime fetches the file from that member, checks its size and sha256, and stores it under `name` (one plain file name; defaults to the handle's id). An existing file is never replaced unless `overwrite` is true.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "handle": {"type": "string", "description": "The handle share-file returned, whole."},
                "name": {"type": "string", "description": "The file name to store it under in the workdir, e.g. `report.csv`."},
                "overwrite": {"type": "boolean", "description": "Replace a file of that name. Defaults to false."}
            },
            "required": ["handle"],
            "additionalProperties": false
        }),
        kind: ToolKind::FetchPeerFile,
    }
}

/// The fetch-peer-file tool ([`super::registry`]).
pub struct FetchPeerFile;

impl super::Tool for FetchPeerFile {
    /// Writes one `peer_file_fetched` record per fetch tried at a door (handle id,
    /// member, name, size, sha256, and `error` when it failed); never the secret.
    fn call(
        &self,
        cx: &mut dyn super::Session,
        _entry: &ToolEntry,
        input: &Value,
    ) -> super::Answer {
        let Some(pf) = cx.peer_files().filter(|p| !p.doors.is_empty()).cloned() else {
            return ToolResult::refused(cx.absent(NAME)).into();
        };
        let text = match input.get("handle") {
            Some(Value::String(t)) => t.clone(),
            Some(v) => return ToolResult::refused(format!("'fetch-peer-file' needs `handle` as a string, found {}", super::json_type(v))).into(),
            None => return ToolResult::refused("'fetch-peer-file' needs `handle`: the handle share-file returned to the member that shared the file").into(),
        };
        if let Some(k) = input.as_object().and_then(|o| {
            o.keys()
                .find(|k| !matches!(k.as_str(), "handle" | "name" | "overwrite"))
        }) {
            return ToolResult::refused(format!(
                "'fetch-peer-file' takes `handle`, `name` and `overwrite` only; unknown key `{k}`"
            ))
            .into();
        }
        let handle = match Handle::parse(&text) {
            Ok(h) => h,
            Err(e) => return ToolResult::refused(format!("'fetch-peer-file': {e}")).into(),
        };
        let name = match input.get("name") {
            None | Some(Value::Null) => handle.id.clone(),
            Some(Value::String(n)) => n.clone(),
            Some(v) => {
                return ToolResult::refused(format!(
                    "'fetch-peer-file' needs `name` as a string, found {}",
                    super::json_type(v)
                ))
                .into()
            }
        };
        let overwrite = match input.get("overwrite") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return ToolResult::refused(format!(
                    "'fetch-peer-file' needs `overwrite` as true or false, found {}",
                    super::json_type(v)
                ))
                .into()
            }
        };
        if let Err(e) = peer_file::check_fetch_name(&name) {
            return ToolResult::refused(e).into();
        }
        let Some(door) = pf.door_of(&handle) else {
            return ToolResult::refused("'fetch-peer-file' fetched nothing: the handle was not minted in this formation (no member here issued it); only handles from this formation's members can be fetched").into();
        };
        if let Err(e) = pf.egress(door) {
            return ToolResult::refused(e).into();
        }
        let workdir = cx.exec().workdir.to_path_buf();
        let reader = DoorReader::new(&door.url, &door.token, &handle, REQUEST_TIMEOUT);
        let res = peer_file::store_fetched(
            &workdir,
            &name,
            overwrite,
            handle.size,
            &handle.sha256,
            pf.max_file_bytes,
            reader,
        );
        let mut rec = crate::fields! {
            "handle_id" => handle.id,
            "member" => door.member,
            "name" => name,
            "size" => handle.size,
            "sha256" => handle.sha256,
        };
        let r = match res {
            Ok(s) => {
                rec.insert("path".into(), json!(s.name));
                ToolResult::passed(
                    format!("Fetched {} from {}: {} bytes", s.name, door.member, s.size),
                    format!(
                        "path: {}\nsize: {}\nsha256: {}\nmember: {}",
                        s.name, s.size, s.sha256, door.member
                    ),
                )
            }
            Err(e) => {
                rec.insert("error".into(), json!(e));
                ToolResult::failed(format!("Fetch from {} failed", door.member), e)
            }
        };
        super::Answer::from(r).with_record("peer_file_fetched", rec)
    }
}
