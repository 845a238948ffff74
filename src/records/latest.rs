//! The `latest` symlinks: `$MURMUR_HOME/records/latest` points at the records directory
//! of the newest session started, and `$MURMUR_HOME/records/<capsule path>/latest` at
//! the newest of that capsule. `mur trace latest` reads the first.
//!
//! A link is replaced atomically: a new symlink under a temporary name beside it, then
//! `rename(2)` over the old one, so a reader sees the old target or the new one, never
//! no link, and two sessions starting at once leave one of them, whole.

use std::path::Path;

/// Points the symlink `link` at `target` (made absolute), creating `link`'s parent.
///
/// Errors: the parent cannot be created, or the link cannot be written or renamed.
pub fn point(link: &Path, target: &Path) -> std::io::Result<()> {
    let target = std::path::absolute(target)?;
    let parent = link.parent().unwrap_or(Path::new("."));
    crate::private::create_dir_all(parent)?;
    let name = link
        .file_name()
        .map_or_else(|| "latest".into(), |n| n.to_string_lossy().into_owned());
    let tmp = parent.join(format!(
        ".{name}.{}.{:08x}.tmp",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::os::unix::fs::symlink(&target, &tmp)?;
    std::fs::rename(&tmp, link).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Points every link of `links` at `target`; a link that cannot be written is a
/// warning, never a reason to stop the session.
pub fn point_all(links: &[&Path], target: &Path) {
    for l in links {
        if let Err(e) = point(l, target) {
            log::warn!("cannot point {} at {}: {e}", l.display(), target.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_link_and_leaves_no_temporary_name() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let link = d.path().join("records").join("latest");
        point(&link, &a).unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), a);
        point(&link, &b).unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), b);
        let names: Vec<_> = std::fs::read_dir(link.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("latest")]);
    }
}
