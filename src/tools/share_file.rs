//! share-file: mints a peer-file handle for one file under the declared export root
//! (spec, "The twelve": `exports.peer_files`; mur-tools(7), "Peer files").
//!
//! The file is opened beneath the workdir through the export root without following
//! any symlink ([`super::peer_file::open_beneath`]), copied while hashing into an
//! immutable snapshot in the records' `peer-files/`, and named by a handle the
//! member's door serves for the formation's life.

use serde_json::{json, Value};

// Data: `handle: …`, `name: …`, `size: …`, `sha256: …` lines (mur-tools(7)).

use super::{ToolEntry, ToolKind, ToolResult};

/// The tool's name.
pub const NAME: &str = "share-file";

/// The inventory entry. Input: `{"path": "<relative to the export root>"}`.
pub fn entry() -> ToolEntry {
    ToolEntry {
        name: NAME.into(),
        description: "Shares one file under this capsule's export root with the other members of the formation: the runtime copies it as it is now and returns a handle. Give the handle, whole, to the member that needs the file (in a call-member task or in your answer); that member stores the file with fetch-peer-file. A later change to the file does not change what the handle gives. The handle is valid while the formation runs.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The file's path relative to the export root, e.g. `report.csv` or `out/data.json`."}
            },
            "required": ["path"],
            "additionalProperties": false
        }),
        kind: ToolKind::ShareFile,
    }
}

/// The share-file tool ([`super::registry`]).
pub struct ShareFile;

impl super::Tool for ShareFile {
    /// Writes one `peer_file_shared` record per handle minted (its id, never its
    /// secret).
    fn call(
        &self,
        cx: &mut dyn super::Session,
        _entry: &ToolEntry,
        input: &Value,
    ) -> super::Answer {
        let Some(store) = cx.peer_files().and_then(|p| {
            p.store
                .clone()
                .map(|s| (s, p.export_root.clone(), p.max_file_bytes))
        }) else {
            return ToolResult::refused(cx.absent(NAME)).into();
        };
        let (store, root, max) = store;
        let path = match input.get("path") {
            Some(Value::String(p)) => p.clone(),
            Some(v) => {
                return ToolResult::refused(format!(
                    "'share-file' needs `path` as a string, found {}",
                    super::json_type(v)
                ))
                .into()
            }
            None => {
                return ToolResult::refused(
                    "'share-file' needs `path`: the file's path relative to the export root",
                )
                .into()
            }
        };
        if let Some(k) = input
            .as_object()
            .and_then(|o| o.keys().find(|k| *k != "path"))
        {
            return ToolResult::refused(format!(
                "'share-file' takes `path` only; unknown key `{k}`"
            ))
            .into();
        }
        // Checked first on its own, so the message names the model's path, not the
        // export root joined to it.
        if let Err(e) = super::peer_file::check_share_path(&path) {
            return ToolResult::refused(e).into();
        }
        let workdir = cx.exec().workdir.to_path_buf();
        // The export root's own components, then the path: resolved together beneath
        // the workdir, so a symlink swapped in for the root is refused too.
        let mut full: Vec<String> = root
            .components()
            .filter_map(|c| match c {
                std::path::Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        full.push(path.clone());
        let full = full.join("/");
        let shared = match store.share(&workdir, &full, max) {
            Ok(s) => s,
            Err(e) => {
                let e = e.replace(
                    &format!("`{}`", full.escape_debug()),
                    &format!("`{}`", path.escape_debug()),
                );
                return ToolResult::refused(e).into();
            }
        };
        let h = &shared.handle;
        let data = format!(
            "handle: {}\nname: {}\nsize: {}\nsha256: {}",
            h.text(),
            shared.name,
            h.size,
            h.sha256
        );
        let r = ToolResult::passed(format!("Shared {}: {} bytes", shared.name, h.size), data)
            .with_note("[share-file] Pass the handle, whole and unchanged, to the member that needs the file; it stores the file with fetch-peer-file. The handle works only inside this formation, while it runs.");
        super::Answer::from(r).with_record(
            "peer_file_shared",
            crate::fields! {
                "handle_id" => h.id,
                "path" => path,
                "name" => shared.name,
                "size" => h.size,
                "sha256" => h.sha256,
                "snapshot" => shared.snapshot.display().to_string(),
            },
        )
    }
}
