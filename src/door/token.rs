//! The bearer token of `mur door`: where it comes from and what is refused.
//!
//! The token is the first line of `--token-file` (surrounding whitespace trimmed), else
//! the environment variable `MURMUR_DOOR_TOKEN`. Refused, with a message saying how to
//! fix it:
//!
//! - a token file that group or others may read or write (any of mode `0o077`): the
//!   token is a password; `chmod 600 FILE` (systemd's `LoadCredential` files are
//!   `0400` and pass);
//! - a token shorter than [`MIN_TOKEN_LEN`] bytes, from either source;
//! - no token at all (the door has no unauthenticated mode).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The shortest token `mur door` accepts, in bytes: 16. `openssl rand -hex 32` makes
/// 64.
pub const MIN_TOKEN_LEN: usize = 16;

/// Reads the token from `file`, else from `env` (the value of `MURMUR_DOOR_TOKEN`).
///
/// # Errors
///
/// A message ready to print: the file cannot be read, is open to other users, its
/// first line is empty, the token is too short, or there is none.
pub fn read_token(file: Option<&Path>, env: Option<String>) -> Result<String, String> {
    let (token, source) = match file {
        Some(f) => {
            let shown = f.display();
            let meta = std::fs::metadata(f).map_err(|e| format!("--token-file {shown}: {e}"))?;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(format!(
                    "--token-file {shown} can be read or written by other users (mode {mode:04o}); make it private with `chmod 600 {shown}`"
                ));
            }
            let t = std::fs::read_to_string(f)
                .map_err(|e| format!("--token-file {shown}: {e}"))?
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string();
            if t.is_empty() {
                return Err(format!(
                    "--token-file {shown}: the first line is empty; write the bearer token on it"
                ));
            }
            (t, format!("--token-file {shown}"))
        }
        None => (
            env.unwrap_or_default().trim().to_string(),
            "MURMUR_DOOR_TOKEN".to_string(),
        ),
    };
    if token.is_empty() {
        return Err("mur door needs a bearer token: give --token-file FILE or set MURMUR_DOOR_TOKEN (the door has no unauthenticated mode)".into());
    }
    if token.len() < MIN_TOKEN_LEN {
        return Err(format!(
            "{source}: the bearer token is {} bytes, shorter than the {MIN_TOKEN_LEN} a door accepts; make one with `openssl rand -hex 32`",
            token.len()
        ));
    }
    Ok(token)
}
