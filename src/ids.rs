//! Identifiers: session `ses_…`, task `tsk_…` (a ULID, 26 lowercase Crockford base32
//! characters), work id `wrk_<32 hex>`, call id `mcl_…`, delegation id `dlg_…`, plan id `pln_…`.

/// A new session id, `ses_` + a lowercase ULID.
pub fn session_id() -> String {
    format!("ses_{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// A new task id, `tsk_` + a lowercase ULID.
pub fn task_id() -> String {
    format!("tsk_{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// A new member call id, `mcl_` + a lowercase ULID.
pub fn call_id() -> String {
    format!("mcl_{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// A new plan id, `pln_` + a lowercase ULID.
pub fn plan_id() -> String {
    format!("pln_{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// A new work id, `wrk_` + 32 lowercase hex digits (a ULID's 128 bits, so ids sort by
/// creation time).
pub fn work_id() -> String {
    format!("wrk_{:032x}", u128::from(ulid::Ulid::new()))
}

/// Whether `s` has the form `wrk_<hex>` (one or more lowercase or uppercase hex digits).
pub fn is_work_id(s: &str) -> bool {
    s.strip_prefix("wrk_")
        .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_their_forms() {
        let s = session_id();
        assert_eq!(s.len(), 4 + 26);
        assert!(s[4..]
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()));
        let w = work_id();
        assert_eq!(w.len(), 4 + 32);
        assert!(is_work_id(&w));
        assert!(!is_work_id("wrk_"));
        assert!(!is_work_id("wrk_xyz"));
        assert!(!is_work_id("job_0a"));
    }
}
