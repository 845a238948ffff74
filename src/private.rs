//! Files and directories only the user running `mur` can read: records (trace, logs,
//! `out/`) and runtime directories are created `0700`, their files `0600`, whatever
//! the process umask (under the common 022, `create_dir_all` would make traces
//! world-readable). A directory that already exists keeps its mode: an operator who
//! made `--records-dir` or `$MURMUR_HOME` shared chose so.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// The mode of a directory `mur` creates for records or runtime state.
pub const DIR_MODE: u32 = 0o700;
/// The mode of a file `mur` creates in one.
pub const FILE_MODE: u32 = 0o600;

/// `create_dir_all` with every directory it creates made `0700`.
///
/// # Errors
///
/// As [`std::fs::create_dir_all`].
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
}

/// Options that create a file `0600` (the mode applies only when it is created).
pub fn file_options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.mode(FILE_MODE);
    o
}

/// Writes `bytes` to `path`, creating it `0600` or truncating it.
///
/// # Errors
///
/// As [`std::fs::write`].
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    use std::io::Write;
    let mut f: File = file_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    f.write_all(bytes.as_ref())
}
